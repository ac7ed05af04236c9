//! The MPI_T entry points (MPI 4.1 chapter 15) over the registry in tool/. They return
//! their MPI_T_ERR_* codes and never call error handlers (MPI 4.1 15.3.1); they work before
//! MPI_Init and after MPI_Finalize. Handles are the registry's ids carried as pointers, so a
//! bogus handle is simply not found. Strings follow 15.3.3: a null buffer or a length of 0
//! asks for the length (terminating null included); otherwise at most `*len - 1` characters
//! and a null are written and `*len` says how many were written; a null length pointer
//! leaves the buffer alone. Events and event sources: Ferrite has none (the counts are 0 and
//! every index or handle is invalid).

use super::consts::*;
use super::symbols::is_pvar_all_handles;
use crate::tool::cvars::{self, Kind, Value, STR_COUNT};
use crate::tool::{self, pvars, TResult, Target};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// Declares `PMPI_X` and its forwarder `MPI_X` for an MPI_T function: the body returns
/// `TResult<()>`, whose error is the return code; a panic returns MPI_ERR_INTERN.
macro_rules! mpit_fn {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) => $body:block) => {
        paste::paste! {
            $(#[$m])*
            #[no_mangle]
            pub unsafe extern "C" fn [<P $name>]($($arg: $ty),*) -> c_int {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
                    || -> TResult<()> { $body },
                ));
                match r {
                    Ok(Ok(())) => MPI_SUCCESS,
                    Ok(Err(code)) => code,
                    Err(_) => MPI_ERR_INTERN,
                }
            }

            $(#[$m])*
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
                // SAFETY: the caller upholds the same contract as for the PMPI_ entry point.
                unsafe { [<P $name>]($($arg),*) }
            }
        }
    };
}

/// Writes `v` through an optional output pointer.
fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: a non-null output argument points to a writable T (the caller's contract).
        unsafe { p.write(v) };
    }
}

/// Writes `v` through a required output pointer (MPI_T_ERR_INVALID if null).
fn put_req<T>(p: *mut T, v: T) -> TResult<()> {
    if p.is_null() {
        return Err(MPI_T_ERR_INVALID);
    }
    put(p, v);
    Ok(())
}

/// A string output with its in/out length (15.3.3).
fn put_str(s: &str, buf: *mut c_char, len: *mut c_int) {
    if len.is_null() {
        return;
    }
    // SAFETY: non-null `len` points to an int the caller initialized (the buffer's size).
    let cap = unsafe { len.read() };
    if buf.is_null() || cap <= 0 {
        put(len, s.len() as c_int + 1);
        return;
    }
    let n = s.len().min(cap as usize - 1);
    // SAFETY: `buf` holds `cap` > n bytes (the caller's contract for the length it passed).
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
    put(len, n as c_int + 1);
}

/// A name argument.
fn name_in<'a>(name: *const c_char) -> TResult<&'a str> {
    if name.is_null() {
        return Err(MPI_T_ERR_INVALID);
    }
    // SAFETY: a non-null name is a null-terminated string (the caller's contract).
    let s = unsafe { CStr::from_ptr(name) };
    s.to_str().map_err(|_| MPI_T_ERR_INVALID_NAME)
}

/// Up to `len` entries of `list` into `indices` (MPI_T_category_get_cvars and friends).
fn put_list(list: &[c_int], len: c_int, indices: *mut c_int) -> TResult<()> {
    let n = list
        .len()
        .min(usize::try_from(len).map_err(|_| MPI_T_ERR_INVALID)?);
    if n == 0 {
        return Ok(());
    }
    if indices.is_null() {
        return Err(MPI_T_ERR_INVALID);
    }
    // SAFETY: `indices` holds `len` >= n ints (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(list.as_ptr(), indices, n) };
    Ok(())
}

fn id_of(p: *mut c_void) -> u64 {
    p as usize as u64
}

fn handle_of(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

/// MPI_T_enum handles: the cvar index plus one (only choice cvars have one).
fn enum_of(cvar: usize) -> MPI_T_enum {
    handle_of(cvar as u64 + 1)
}

fn enum_items(e: MPI_T_enum) -> TResult<(usize, &'static [&'static str])> {
    let i = id_of(e).checked_sub(1).ok_or(MPI_T_ERR_INVALID_HANDLE)?;
    match cvars::all().get(i as usize).map(|c| c.kind) {
        Some(Kind::Choice(items)) => Ok((i as usize, items)),
        _ => Err(MPI_T_ERR_INVALID_HANDLE),
    }
}

fn category(i: c_int) -> TResult<&'static tool::Category> {
    tool::check()?;
    usize::try_from(i)
        .ok()
        .and_then(|i| tool::categories().get(i))
        .ok_or(MPI_T_ERR_INVALID_INDEX)
}

fn pvar_target(h: MPI_T_pvar_handle) -> Target {
    if is_pvar_all_handles(h) {
        Target::All
    } else {
        Target::One(id_of(h))
    }
}

/// A single handle (read, write, readreset do not take MPI_T_PVAR_ALL_HANDLES).
fn one_pvar(h: MPI_T_pvar_handle) -> TResult<u64> {
    match pvar_target(h) {
        Target::One(id) => Ok(id),
        Target::All => Err(MPI_T_ERR_INVALID_HANDLE),
    }
}

// ----- set-up -----

mpit_fn! {
    fn MPI_T_init_thread(required: c_int, provided: *mut c_int) => {
        put(provided, tool::init(required));
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_finalize() => {
        tool::finalize()
    }
}

// ----- control variables -----

mpit_fn! {
    fn MPI_T_cvar_get_num(num_cvar: *mut c_int) => {
        tool::check()?;
        put_req(num_cvar, cvars::all().len() as c_int)
    }
}

mpit_fn! {
    fn MPI_T_cvar_get_info(cvar_index: c_int, name: *mut c_char, name_len: *mut c_int,
                           verbosity: *mut c_int, datatype: *mut MPI_Datatype,
                           enumtype: *mut MPI_T_enum, desc: *mut c_char, desc_len: *mut c_int,
                           bind: *mut c_int, scope: *mut c_int) => {
        tool::check()?;
        let i = tool::cvar_index(cvar_index)?;
        let c = &cvars::all()[i];
        put_str(c.name, name, name_len);
        put(verbosity, c.verbosity);
        put(datatype, cvars::datatype(c.kind));
        let e = match c.kind {
            Kind::Choice(_) => enum_of(i),
            _ => std::ptr::null_mut(),
        };
        put(enumtype, e);
        put_str(c.desc, desc, desc_len);
        put(bind, MPI_T_BIND_NO_OBJECT);
        put(scope, c.scope);
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_cvar_get_index(name: *const c_char, cvar_index: *mut c_int) => {
        tool::check()?;
        let n = name_in(name)?;
        let i = cvars::all().iter().position(|c| c.name == n).ok_or(MPI_T_ERR_INVALID_NAME)?;
        put_req(cvar_index, i as c_int)
    }
}

mpit_fn! {
    fn MPI_T_cvar_handle_alloc(cvar_index: c_int, obj_handle: *mut c_void,
                               handle: *mut MPI_T_cvar_handle, count: *mut c_int) => {
        let _ = obj_handle; // every cvar is bound to no object
        if handle.is_null() || count.is_null() {
            tool::check()?;
            return Err(MPI_T_ERR_INVALID);
        }
        let (id, i) = tool::cvar_handle_alloc(cvar_index)?;
        put(handle, handle_of(id));
        put(count, cvars::count(cvars::all()[i].kind));
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_cvar_handle_free(handle: *mut MPI_T_cvar_handle) => {
        if handle.is_null() {
            tool::check()?;
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: non-null, points to the caller's handle.
        let id = id_of(unsafe { handle.read() });
        tool::cvar_handle_free(id)?;
        put(handle, std::ptr::null_mut());
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_cvar_read(handle: MPI_T_cvar_handle, buf: *mut c_void) => {
        let i = tool::cvar_of(id_of(handle))?;
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        match cvars::read(i) {
            Value::Int(v) => put(buf.cast::<c_int>(), v),
            Value::Ull(v) => put(buf.cast::<u64>(), v),
            Value::Str(s) => {
                let mut len = STR_COUNT as c_int;
                put_str(&s, buf.cast(), &mut len);
            }
        }
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_cvar_write(handle: MPI_T_cvar_handle, buf: *const c_void) => {
        let i = tool::cvar_of(id_of(handle))?;
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // `buf` holds `count` elements of the cvar's datatype (the caller's contract for
        // MPI_T_cvar_write).
        let v = match cvars::all()[i].kind {
            Kind::Int | Kind::Choice(_) => {
                // SAFETY: one int (see above).
                Value::Int(unsafe { buf.cast::<c_int>().read() })
            }
            // SAFETY: one unsigned long long (see above).
            Kind::Ull => Value::Ull(unsafe { buf.cast::<u64>().read() }),
            Kind::Str => {
                // Byte by byte up to the null: a string shorter than `count` is fine.
                let mut bytes = Vec::new();
                loop {
                    // SAFETY: a byte of the string, at or before its null (see above).
                    let b = unsafe { buf.cast::<u8>().add(bytes.len()).read() };
                    if b == 0 {
                        break;
                    }
                    bytes.push(b);
                    if bytes.len() == STR_COUNT {
                        return Err(MPI_T_ERR_INVALID); // no null within `count` bytes
                    }
                }
                Value::Str(String::from_utf8(bytes).map_err(|_| MPI_T_ERR_INVALID)?)
            }
        };
        cvars::write(i, v)
    }
}

// ----- enumerations -----

mpit_fn! {
    fn MPI_T_enum_get_info(enumtype: MPI_T_enum, num: *mut c_int, name: *mut c_char,
                           name_len: *mut c_int) => {
        tool::check()?;
        let (i, items) = enum_items(enumtype)?;
        put(num, items.len() as c_int);
        let n = cvars::all()[i].name.trim_start_matches("FERRITE_").to_ascii_lowercase();
        put_str(&n, name, name_len);
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_enum_get_item(enumtype: MPI_T_enum, indx: c_int, value: *mut c_int,
                           name: *mut c_char, name_len: *mut c_int) => {
        tool::check()?;
        let (_, items) = enum_items(enumtype)?;
        let item = usize::try_from(indx)
            .ok()
            .and_then(|k| items.get(k))
            .ok_or(MPI_T_ERR_INVALID_ITEM)?;
        put(value, indx);
        put_str(item, name, name_len);
        Ok(())
    }
}

// ----- performance variables -----

mpit_fn! {
    fn MPI_T_pvar_get_num(num_pvar: *mut c_int) => {
        tool::check()?;
        put_req(num_pvar, pvars::ALL.len() as c_int)
    }
}

mpit_fn! {
    fn MPI_T_pvar_get_info(pvar_index: c_int, name: *mut c_char, name_len: *mut c_int,
                           verbosity: *mut c_int, var_class: *mut c_int,
                           datatype: *mut MPI_Datatype, enumtype: *mut MPI_T_enum,
                           desc: *mut c_char, desc_len: *mut c_int, bind: *mut c_int,
                           readonly: *mut c_int, continuous: *mut c_int, atomic: *mut c_int) => {
        tool::check()?;
        let p = &pvars::ALL[tool::pvar_index(pvar_index)?];
        put_str(p.name, name, name_len);
        let v = if p.area == "p2p" {
            MPI_T_VERBOSITY_USER_BASIC
        } else {
            MPI_T_VERBOSITY_TUNER_DETAIL
        };
        put(verbosity, v);
        put(var_class, p.class);
        put(datatype, MPI_UNSIGNED_LONG_LONG);
        put(enumtype, std::ptr::null_mut());
        put_str(p.desc, desc, desc_len);
        put(bind, MPI_T_BIND_NO_OBJECT);
        put(readonly, p.readonly() as c_int);
        put(continuous, p.continuous() as c_int);
        put(atomic, p.atomic() as c_int);
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_pvar_get_index(name: *const c_char, var_class: c_int, pvar_index: *mut c_int) => {
        tool::check()?;
        let n = name_in(name)?;
        let i = pvars::ALL
            .iter()
            .position(|p| p.name == n && p.class == var_class)
            .ok_or(MPI_T_ERR_INVALID_NAME)?;
        put_req(pvar_index, i as c_int)
    }
}

mpit_fn! {
    fn MPI_T_pvar_session_create(session: *mut MPI_T_pvar_session) => {
        if session.is_null() {
            tool::check()?;
            return Err(MPI_T_ERR_INVALID);
        }
        let s = tool::session_create()?;
        put(session, handle_of(s));
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_pvar_session_free(session: *mut MPI_T_pvar_session) => {
        if session.is_null() {
            tool::check()?;
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: non-null, points to the caller's session handle.
        tool::session_free(id_of(unsafe { session.read() }))?;
        put(session, std::ptr::null_mut());
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_pvar_handle_alloc(session: MPI_T_pvar_session, pvar_index: c_int,
                               obj_handle: *mut c_void, handle: *mut MPI_T_pvar_handle,
                               count: *mut c_int) => {
        let _ = obj_handle; // every pvar is bound to no object
        if handle.is_null() || count.is_null() {
            tool::check()?;
            return Err(MPI_T_ERR_INVALID);
        }
        let h = tool::pvar_handle_alloc(id_of(session), pvar_index)?;
        put(handle, handle_of(h));
        put(count, 1);
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_pvar_handle_free(session: MPI_T_pvar_session, handle: *mut MPI_T_pvar_handle) => {
        if handle.is_null() {
            tool::check()?;
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: non-null, points to the caller's handle.
        let h = unsafe { handle.read() };
        if is_pvar_all_handles(h) {
            tool::check()?;
            return Err(MPI_T_ERR_INVALID_HANDLE);
        }
        tool::pvar_handle_free(id_of(session), id_of(h))?;
        put(handle, std::ptr::null_mut());
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_pvar_start(session: MPI_T_pvar_session, handle: MPI_T_pvar_handle) => {
        tool::pvar_start_stop(id_of(session), pvar_target(handle), true)
    }
}

mpit_fn! {
    fn MPI_T_pvar_stop(session: MPI_T_pvar_session, handle: MPI_T_pvar_handle) => {
        tool::pvar_start_stop(id_of(session), pvar_target(handle), false)
    }
}

mpit_fn! {
    fn MPI_T_pvar_read(session: MPI_T_pvar_session, handle: MPI_T_pvar_handle,
                       buf: *mut c_void) => {
        tool::check()?;
        let v = tool::pvar_read(id_of(session), one_pvar(handle)?, false)?;
        put_req(buf.cast::<u64>(), v)
    }
}

mpit_fn! {
    fn MPI_T_pvar_readreset(session: MPI_T_pvar_session, handle: MPI_T_pvar_handle,
                            buf: *mut c_void) => {
        tool::check()?;
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        let v = tool::pvar_read(id_of(session), one_pvar(handle)?, true)?;
        put_req(buf.cast::<u64>(), v)
    }
}

mpit_fn! {
    fn MPI_T_pvar_write(session: MPI_T_pvar_session, handle: MPI_T_pvar_handle,
                        buf: *const c_void) => {
        tool::check()?;
        let h = one_pvar(handle)?;
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: `buf` holds one unsigned long long (every pvar's type and count).
        let v = unsafe { buf.cast::<u64>().read() };
        tool::pvar_set(id_of(session), Target::One(h), Some(v))
    }
}

mpit_fn! {
    fn MPI_T_pvar_reset(session: MPI_T_pvar_session, handle: MPI_T_pvar_handle) => {
        tool::pvar_set(id_of(session), pvar_target(handle), None)
    }
}

// ----- categories -----

mpit_fn! {
    fn MPI_T_category_get_num(num_cat: *mut c_int) => {
        tool::check()?;
        put_req(num_cat, tool::categories().len() as c_int)
    }
}

mpit_fn! {
    fn MPI_T_category_get_info(cat_index: c_int, name: *mut c_char, name_len: *mut c_int,
                               desc: *mut c_char, desc_len: *mut c_int, num_cvars: *mut c_int,
                               num_pvars: *mut c_int, num_categories: *mut c_int) => {
        let c = category(cat_index)?;
        put_str(&c.name, name, name_len);
        put_str(&c.desc, desc, desc_len);
        put(num_cvars, c.cvars.len() as c_int);
        put(num_pvars, c.pvars.len() as c_int);
        put(num_categories, c.categories.len() as c_int);
        Ok(())
    }
}

mpit_fn! {
    fn MPI_T_category_get_index(name: *const c_char, cat_index: *mut c_int) => {
        tool::check()?;
        let n = name_in(name)?;
        let i = tool::categories()
            .iter()
            .position(|c| c.name == n)
            .ok_or(MPI_T_ERR_INVALID_NAME)?;
        put_req(cat_index, i as c_int)
    }
}

mpit_fn! {
    fn MPI_T_category_get_cvars(cat_index: c_int, len: c_int, indices: *mut c_int) => {
        put_list(&category(cat_index)?.cvars, len, indices)
    }
}

mpit_fn! {
    fn MPI_T_category_get_pvars(cat_index: c_int, len: c_int, indices: *mut c_int) => {
        put_list(&category(cat_index)?.pvars, len, indices)
    }
}

mpit_fn! {
    fn MPI_T_category_get_categories(cat_index: c_int, len: c_int, indices: *mut c_int) => {
        put_list(&category(cat_index)?.categories, len, indices)
    }
}

mpit_fn! {
    fn MPI_T_category_get_num_events(cat_index: c_int, num_events: *mut c_int) => {
        category(cat_index)?;
        put_req(num_events, 0)
    }
}

mpit_fn! {
    fn MPI_T_category_get_events(cat_index: c_int, len: c_int, indices: *mut c_int) => {
        category(cat_index)?;
        put_list(&[], len, indices)
    }
}

mpit_fn! {
    /// The categories never change after start-up: the update number stays 0.
    fn MPI_T_category_changed(update_number: *mut c_int) => {
        tool::check()?;
        put_req(update_number, 0)
    }
}

// ----- events and event sources (none) -----

mpit_fn! {
    fn MPI_T_source_get_num(num_sources: *mut c_int) => {
        tool::check()?;
        put_req(num_sources, 0)
    }
}

mpit_fn! {
    fn MPI_T_source_get_info(source_index: c_int, name: *mut c_char, name_len: *mut c_int,
                             desc: *mut c_char, desc_len: *mut c_int,
                             ordering: *mut MPI_T_source_order, ticks_per_second: *mut MPI_Count,
                             max_ticks: *mut MPI_Count, info: *mut MPI_Info) => {
        let _ = (source_index, name, name_len, desc, desc_len, ordering, ticks_per_second,
                 max_ticks, info);
        tool::check()?;
        Err(MPI_T_ERR_INVALID_INDEX)
    }
}

mpit_fn! {
    fn MPI_T_source_get_timestamp(source_index: c_int, timestamp: *mut MPI_Count) => {
        let _ = (source_index, timestamp);
        tool::check()?;
        Err(MPI_T_ERR_INVALID_INDEX)
    }
}

mpit_fn! {
    fn MPI_T_event_get_num(num_events: *mut c_int) => {
        tool::check()?;
        put_req(num_events, 0)
    }
}

mpit_fn! {
    fn MPI_T_event_get_info(event_index: c_int, name: *mut c_char, name_len: *mut c_int,
                            verbosity: *mut c_int, array_of_datatypes: *mut MPI_Datatype,
                            array_of_displacements: *mut MPI_Aint, num_elements: *mut c_int,
                            enumtype: *mut MPI_T_enum, info: *mut MPI_Info, desc: *mut c_char,
                            desc_len: *mut c_int, bind: *mut c_int) => {
        let _ = (event_index, name, name_len, verbosity, array_of_datatypes,
                 array_of_displacements, num_elements, enumtype, info, desc, desc_len, bind);
        tool::check()?;
        Err(MPI_T_ERR_INVALID_INDEX)
    }
}

mpit_fn! {
    fn MPI_T_event_get_index(name: *const c_char, event_index: *mut c_int) => {
        let _ = event_index;
        tool::check()?;
        name_in(name)?;
        Err(MPI_T_ERR_INVALID_NAME)
    }
}

mpit_fn! {
    fn MPI_T_event_handle_alloc(event_index: c_int, obj_handle: *mut c_void, info: MPI_Info,
                                event_registration: *mut MPI_T_event_registration) => {
        let _ = (event_index, obj_handle, info, event_registration);
        tool::check()?;
        Err(MPI_T_ERR_INVALID_INDEX)
    }
}

/// The entry points that take an event registration or instance: none can exist. (The
/// empty bodies are for build.rs's scan, which counts `fn MPI_X(..) {` as implemented.)
macro_rules! no_event_handle {
    ($(fn $name:ident($($arg:ident : $ty:ty),*) {})*) => {
        $(mpit_fn! {
            fn $name($($arg: $ty),*) => {
                let _ = ($($arg,)*);
                tool::check()?;
                Err(MPI_T_ERR_INVALID_HANDLE)
            }
        })*
    };
}

no_event_handle! {
    fn MPI_T_event_handle_free(event_registration: MPI_T_event_registration,
                               user_data: *mut c_void,
                               free_cb_function: Option<MPI_T_event_free_cb_function>) {}
    fn MPI_T_event_handle_get_info(event_registration: MPI_T_event_registration,
                                   info_used: *mut MPI_Info) {}
    fn MPI_T_event_handle_set_info(event_registration: MPI_T_event_registration, info: MPI_Info) {}
    fn MPI_T_event_register_callback(event_registration: MPI_T_event_registration,
                                     cb_safety: MPI_T_cb_safety, info: MPI_Info,
                                     user_data: *mut c_void,
                                     event_cb_function: Option<MPI_T_event_cb_function>) {}
    fn MPI_T_event_callback_get_info(event_registration: MPI_T_event_registration,
                                     cb_safety: MPI_T_cb_safety, info_used: *mut MPI_Info) {}
    fn MPI_T_event_callback_set_info(event_registration: MPI_T_event_registration,
                                     cb_safety: MPI_T_cb_safety, info: MPI_Info) {}
    fn MPI_T_event_set_dropped_handler(event_registration: MPI_T_event_registration,
                                       dropped_cb_function: Option<MPI_T_event_dropped_cb_function>) {}
    fn MPI_T_event_copy(event_instance: MPI_T_event_instance, buffer: *mut c_void) {}
    fn MPI_T_event_get_source(event_instance: MPI_T_event_instance, source_index: *mut c_int) {}
    fn MPI_T_event_get_timestamp(event_instance: MPI_T_event_instance,
                                 event_timestamp: *mut MPI_Count) {}
    fn MPI_T_event_read(event_instance: MPI_T_event_instance, element_index: c_int,
                        buffer: *mut c_void) {}
}
