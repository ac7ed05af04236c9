//! Generates the Rust side of the C interface from `include/mpi.h`, the one list of the API:
//!
//! - `consts.rs`: a Rust alias for every handle/scalar/callback typedef and a constant for every
//!   `#define MPI_*` value (and enum constant), with MPICH's values;
//! - `stubs.rs`: for every `FERRITE_API(...)` function that no `mpi_fn!` (or hand-written
//!   `extern "C" fn MPI_X`) in `src/` implements, exported `PMPI_X` and `MPI_X` symbols with the
//!   real C signature that fail with MPI_ERR_UNSUPPORTED_OPERATION naming the function;
//! - `sigcheck.rs`: for every function that `src/` implements, `const _: unsafe extern "C"
//!   fn(<the mpi.h parameter types>) -> <return type> = path::PMPI_X;` (and `MPI_X`), so a
//!   Rust signature that differs from the mpi.h prototype in any argument or the return type
//!   is a compile error, not memory corruption at run time.
//!
//! Only the C subset the header uses is understood; anything else makes the build fail with a
//! message saying which line, so the header and this parser cannot silently drift apart.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let header_path = manifest.join("../../include/mpi.h");
    let src_dir = manifest.join("src");
    println!("cargo:rerun-if-changed={}", header_path.display());
    println!("cargo:rerun-if-changed={}", src_dir.display());
    println!("cargo:rerun-if-changed=build.rs");
    // Installed as libmpi.so.12: programs linked with -lmpi record that name, as with MPICH.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.12");

    let header = std::fs::read_to_string(&header_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", header_path.display()));
    let api = Api::parse(&header);

    let mut implemented = BTreeMap::new();
    scan_sources(&src_dir, &src_dir, &mut implemented);

    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    write_if_changed(&out.join("consts.rs"), &api.consts_rs());
    write_if_changed(&out.join("stubs.rs"), &api.stubs_rs(&implemented));
    write_if_changed(&out.join("sigcheck.rs"), &api.sigcheck_rs(&implemented));
    compile_long_double(&out);
}

/// Collectives: reductions on long double types are in C (Rust has no 80-bit float). Built
/// with the system C compiler ($CC or cc) into a static library linked into Ferrite.
fn compile_long_double(out: &Path) {
    let src = "src/coll/longdouble.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("longdouble.o");
    let lib = out.join("libferrite_longdouble.a");
    let run = |cmd: &mut std::process::Command| {
        let st = cmd
            .status()
            .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
        assert!(st.success(), "{cmd:?} failed");
    };
    run(std::process::Command::new(&cc)
        .args(["-O2", "-fPIC", "-c", src, "-o"])
        .arg(&obj));
    let _ = std::fs::remove_file(&lib);
    run(std::process::Command::new("ar")
        .arg("crs")
        .arg(&lib)
        .arg(&obj));
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=ferrite_longdouble");
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}

/// What a C type name becomes in Rust.
#[derive(Clone, Debug)]
enum TypeKind {
    /// A plain value type (`c_int`, `MPI_Aint`, a handle alias, ...).
    Value(String),
    /// A callback typedef: a pointer to it is `Option<Name>`.
    Callback,
}

#[derive(Debug)]
struct Function {
    ret: String,
    name: String,
    params: Vec<Param>,
}

#[derive(Debug)]
struct Param {
    name: String,
    c_type: String,
    rust_type: String,
}

#[derive(Default)]
struct Api {
    /// C type name -> Rust type (aliases emitted into consts.rs, in header order).
    aliases: Vec<(String, String)>,
    types: BTreeMap<String, TypeKind>,
    /// (name, rust type, rust value expression, comment)
    consts: Vec<(String, String, String)>,
    const_types: BTreeMap<String, String>,
    functions: Vec<Function>,
}

/// Removes comments, joins continuation lines.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        let end = rest[i + 2..]
            .find("*/")
            .expect("unterminated comment in mpi.h");
        // Keep line structure so #define lines stay lines.
        out.extend(rest[i..i + 2 + end + 2].chars().filter(|c| *c == '\n'));
        rest = &rest[i + 2 + end + 2..];
    }
    out.push_str(rest);
    out.replace("\\\n", " ")
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// Parses an integer literal like `0x4c000405`, `-32766`, `(-1)`.
fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    let s = s
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .unwrap_or(s)
        .trim();
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d.trim()),
        None => (false, s),
    };
    let v = if let Some(h) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(h, 16).ok()?
    } else {
        digits.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// Removes one pair of parentheses enclosing the whole expression.
fn unparen(s: &str) -> &str {
    let s = s.trim();
    if s.starts_with('(') && s.ends_with(')') {
        let mut depth = 0;
        for (i, c) in s.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 && i != s.len() - 1 {
                        return s;
                    }
                }
                _ => {}
            }
        }
        return s[1..s.len() - 1].trim();
    }
    s
}

fn int_literal(v: i64) -> String {
    if v > i32::MAX as i64 {
        format!("{v:#010x}_u32 as i32")
    } else if v >= 0x10000 {
        format!("{v:#010x}")
    } else {
        v.to_string()
    }
}

impl Api {
    fn parse(header: &str) -> Api {
        let mut api = Api::default();
        for (c, r) in [
            ("int", "c_int"),
            ("long", "c_long"),
            ("char", "c_char"),
            ("double", "f64"),
            ("void", "c_void"),
            ("MPI_Status", "MPI_Status"),
            ("MPI_F08_status", "MPI_F08_status"),
        ] {
            api.types.insert(c.into(), TypeKind::Value(r.into()));
        }
        let text = strip_comments(header);

        // Pass 1: typedefs and enums (statements ending with ';' outside #-lines).
        let statements: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        for stmt in statements.split(';') {
            let s = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
            // A statement may start after `extern "C" {` or a closing brace.
            if let Some(i) = s.find("typedef ") {
                api.parse_typedef(&s[i + "typedef ".len()..]);
            }
        }

        // Pass 2: #define lines.
        for line in text.lines() {
            let l = line.trim();
            let Some(rest) = l.strip_prefix("#define ") else {
                continue;
            };
            let rest = rest.trim();
            let name_end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..name_end];
            let value = rest[name_end..].trim();
            if rest[name_end..].starts_with('(') {
                continue; // function-like macro (handle conversions, FERRITE_API)
            }
            if !name.starts_with("MPI_") {
                continue;
            }
            api.parse_define(name, value);
        }

        // Pass 3: functions.
        let mut rest = text.as_str();
        while let Some(i) = rest.find("FERRITE_API(") {
            let start = i + "FERRITE_API(".len();
            let body = &rest[start..];
            let mut depth = 1;
            let mut end = 0;
            for (j, c) in body.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let inner = body[..end].split_whitespace().collect::<Vec<_>>().join(" ");
            rest = &body[end..];
            if inner == "ret, name, params" {
                continue; // the macro's own definition
            }
            let f = api.parse_function(&inner);
            api.functions.push(f);
        }
        api
    }

    fn add_alias(&mut self, c: &str, rust: String, kind: TypeKind) {
        self.aliases.push((c.to_string(), rust));
        self.types.insert(c.to_string(), kind);
    }

    fn parse_typedef(&mut self, rest: &str) {
        // typedef enum NAME { A = 1, B = 2 } NAME
        if let Some(e) = rest.strip_prefix("enum ") {
            let open = e.find('{').expect("enum without body");
            let close = e.rfind('}').expect("enum without end");
            for item in e[open + 1..close].split(',') {
                let (n, v) = item
                    .split_once('=')
                    .unwrap_or_else(|| panic!("mpi.h enum item needs an explicit value: {item}"));
                let v = parse_int(v).unwrap_or_else(|| panic!("bad enum value in {item}"));
                self.push_const(n.trim(), "c_int", int_literal(v));
            }
            let name = e[close + 1..].trim();
            self.add_alias(name, "c_int".into(), TypeKind::Value(name.into()));
            return;
        }
        // typedef RET(NAME)(PARAMS): a callback type.
        if let Some(open) = rest.find('(') {
            let ret = rest[..open].trim();
            let close = rest[open..].find(')').unwrap() + open;
            let name = rest[open + 1..close].trim();
            let params = rest[close + 1..].trim();
            let params = params
                .strip_prefix('(')
                .and_then(|p| p.strip_suffix(')'))
                .unwrap_or_else(|| panic!("cannot parse callback typedef {rest}"));
            let (args, variadic) = self.parse_params(params);
            let mut sig = args.iter().map(|p| p.rust_type.clone()).collect::<Vec<_>>();
            if variadic {
                sig.push("...".into());
            }
            let r = self.rust_type(ret, 0, false);
            let ret = if r == "c_void" {
                String::new()
            } else {
                format!(" -> {r}")
            };
            let rust = format!("unsafe extern \"C\" fn({}){ret}", sig.join(", "));
            self.add_alias(name, rust, TypeKind::Callback);
            return;
        }
        // typedef struct { ... } NAME  (MPI_F08_status: defined by hand in types.rs)
        if rest.starts_with("struct") && rest.contains('{') {
            return;
        }
        let words: Vec<&str> = rest.split_whitespace().collect();
        let name = words.last().unwrap().trim_start_matches('*');
        let ctype = rest[..rest.rfind(name).unwrap()].trim();
        if name == "MPI_Status" {
            return; // repr(C) struct in types.rs
        }
        let rust = if ctype.ends_with('*') {
            "*mut c_void".to_string() // opaque pointer handles (MPI_File, MPI_T_*)
        } else if ctype.starts_with("struct ") {
            return;
        } else {
            // An existing typedef: scalar or another alias.
            match ctype {
                "long" => "i64".to_string(),
                "int" => "c_int".to_string(),
                other => match self.types.get(other) {
                    Some(TypeKind::Value(_)) => other.to_string(),
                    Some(TypeKind::Callback) => {
                        // typedef A_function B_fn: alias of a callback type.
                        self.add_alias(name, other.to_string(), TypeKind::Callback);
                        return;
                    }
                    None => panic!("mpi.h typedef of unknown type: typedef {rest}"),
                },
            }
        };
        self.add_alias(name, rust, TypeKind::Value(name.into()));
    }

    fn push_const(&mut self, name: &str, ty: &str, value: String) {
        self.const_types.insert(name.to_string(), ty.to_string());
        self.consts.push((name.to_string(), ty.to_string(), value));
    }

    fn parse_define(&mut self, name: &str, value: &str) {
        if value.is_empty() {
            return;
        }
        let v = unparen(value);
        if let Some(i) = parse_int(v) {
            return self.push_const(name, "c_int", int_literal(i));
        }
        if is_ident(v) {
            // Another constant (MPI_LONG_LONG = MPI_LONG_LONG_INT), or a function name
            // (MPI_DUP_FN = MPIR_Dup_fn), or a type (MPIO_Request): only constants matter here.
            if let Some(t) = self.const_types.get(v).cloned() {
                self.push_const(name, &t, v.to_string());
            }
            return;
        }
        // (TYPE)VALUE casts
        if let Some(close) = v.find(')').filter(|_| v.starts_with('(')) {
            let ty = v[1..close].trim();
            let operand = unparen(&v[close + 1..]);
            if ty.ends_with('*')
                || matches!(self.types.get(ty), Some(TypeKind::Value(r)) if self.is_pointer_alias(r))
            {
                // A pointer-valued constant: exposed as the address (usize) it stands for.
                if let Some(i) = parse_int(operand) {
                    let val = if i < 0 {
                        format!("{i}_isize as usize")
                    } else {
                        i.to_string()
                    };
                    return self.push_const(name, "usize", val);
                }
                return; // a cast of a function name (MPI_COMM_DUP_FN): no value
            }
            if let Some(i) = parse_int(operand) {
                let rust = match self.types.get(ty) {
                    Some(TypeKind::Value(_)) => ty.to_string(),
                    _ => panic!("mpi.h: #define {name} casts to unknown type {ty}"),
                };
                return self.push_const(name, &rust, int_literal(i));
            }
        }
        if value.starts_with('"') {
            return; // strings (FERRITE_VERSION) are not MPI_ names
        }
        panic!("mpi.h: cannot turn #define {name} {value} into a Rust constant");
    }

    fn is_pointer_alias(&self, c_name: &str) -> bool {
        self.aliases
            .iter()
            .any(|(n, r)| n == c_name && r.starts_with('*'))
    }

    /// The Rust type of `base` with `depth` levels of pointers; `konst` makes the innermost
    /// pointer `*const`.
    fn rust_type(&self, base: &str, depth: usize, konst: bool) -> String {
        let base_rust = match self.types.get(base) {
            Some(TypeKind::Value(r)) => {
                if r == base || self.aliases.iter().any(|(n, _)| n == base) {
                    base.to_string()
                } else {
                    r.clone()
                }
            }
            Some(TypeKind::Callback) => {
                // A pointer to a callback is a nullable Rust fn pointer. A parameter of
                // function type is adjusted to a pointer to it, as in C.
                let depth = depth.max(1);
                let mut t = format!("Option<{base}>");
                for _ in 1..depth {
                    t = format!("*mut {t}");
                }
                return t;
            }
            None => panic!("mpi.h uses unknown type {base}"),
        };
        let mut t = base_rust;
        for level in 0..depth {
            let q = if konst && level == 0 {
                "*const"
            } else {
                "*mut"
            };
            t = format!("{q} {t}");
        }
        t
    }

    /// Parses a C parameter list; returns the parameters and whether it ends in `...`.
    fn parse_params(&self, params: &str) -> (Vec<Param>, bool) {
        let params = params.trim();
        if params == "void" || params.is_empty() {
            return (Vec::new(), false);
        }
        let mut out = Vec::new();
        let mut variadic = false;
        for (i, p) in params.split(',').enumerate() {
            let p = p.trim();
            if p == "..." {
                variadic = true;
                continue;
            }
            // `int ranges[][3]`: a pointer to arrays of 3 ints.
            let (p_noarr, array_len) = match p.find("][") {
                Some(i) => {
                    let close = p[i + 2..].find(']').unwrap() + i + 2;
                    let n: usize = p[i + 2..close].parse().expect("array length");
                    (format!("{}]{}", &p[..i], &p[close + 1..]), Some(n))
                }
                None => (p.to_string(), None),
            };
            let p = p_noarr.as_str();
            let mut depth = p.matches('*').count() + p.matches("[]").count();
            let konst = p.starts_with("const ");
            let cleaned = p.replace("const ", "").replace(['*', '[', ']'], " ");
            let words: Vec<&str> = cleaned.split_whitespace().collect();
            let (base, name) = match words.as_slice() {
                [t] => (t.to_string(), format!("arg{i}")),
                [t, n] => (t.to_string(), n.to_string()),
                [a, b, n] if *a == "unsigned" || *a == "struct" || *a == "enum" => {
                    (format!("{a} {b}"), n.to_string())
                }
                _ => panic!("mpi.h: cannot parse parameter `{p}`"),
            };
            let base = base
                .trim_start_matches("enum ")
                .trim_start_matches("struct ");
            if base == "MPIR_T_pvar_handle_s" {
                depth = depth.saturating_sub(1);
            }
            let name = match name.as_str() {
                // Rust keywords used as C parameter names.
                "type" | "ref" | "in" | "fn" | "match" | "mod" | "use" | "where" => {
                    format!("{name}_")
                }
                _ => name,
            };
            let rust_type = match array_len {
                Some(n) => {
                    let elem = self.rust_type(base, 0, false);
                    let q = if konst { "*const" } else { "*mut" };
                    format!("{q} [{elem}; {n}]")
                }
                None => self.rust_type(base, depth, konst),
            };
            out.push(Param {
                rust_type,
                c_type: p.to_string(),
                name,
            });
        }
        (out, variadic)
    }

    fn parse_function(&self, inner: &str) -> Function {
        let mut parts = inner.splitn(3, ',');
        let ret = parts.next().unwrap().trim().to_string();
        let name = parts.next().unwrap().trim().to_string();
        let params = parts.next().unwrap().trim();
        let params = params
            .strip_prefix('(')
            .and_then(|p| p.strip_suffix(')'))
            .unwrap_or_else(|| panic!("mpi.h: bad parameter list for {name}"));
        let (params, _variadic) = self.parse_params(params);
        // A variadic C function (MPI_Pcontrol) is defined with its fixed parameters only: on
        // the x86-64 System V ABI a callee ignores the extra arguments.
        Function { ret, name, params }
    }

    fn consts_rs(&self) -> String {
        let mut body = String::from("// Types\n");
        for (c, r) in &self.aliases {
            writeln!(body, "pub type {c} = {r};").unwrap();
        }
        body.push_str("\n// Constants\n");
        for (n, t, v) in &self.consts {
            writeln!(body, "pub const {n}: {t} = {v};").unwrap();
        }
        // Import exactly what the body uses, so the generated file stays warning-free.
        let uses = |word: &str| {
            body.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|w| w == word)
        };
        let raw: Vec<&str> = ["c_char", "c_int", "c_long", "c_void"]
            .into_iter()
            .filter(|w| uses(w))
            .collect();
        let structs: Vec<&str> = ["MPI_F08_status", "MPI_Status"]
            .into_iter()
            .filter(|w| uses(w))
            .collect();
        let mut s = String::from("// @generated by build.rs from include/mpi.h. Do not edit.\n");
        writeln!(s, "use std::os::raw::{{{}}};", raw.join(", ")).unwrap();
        if !structs.is_empty() {
            writeln!(s, "use super::types::{{{}}};", structs.join(", ")).unwrap();
        }
        s.push('\n');
        s.push_str(&body);
        s
    }

    /// The Rust function-pointer type of `f`'s C prototype.
    fn fn_type(&self, f: &Function) -> String {
        let args: Vec<&str> = f.params.iter().map(|p| p.rust_type.as_str()).collect();
        let ret = self.rust_type(&f.ret, 0, false);
        format!("unsafe extern \"C\" fn({}) -> {ret}", args.join(", "))
    }

    /// Compile-time assertions that every implemented function has its mpi.h signature.
    fn sigcheck_rs(&self, implemented: &BTreeMap<String, String>) -> String {
        let mut s = String::from("// @generated by build.rs from include/mpi.h. Do not edit.\n");
        s.push_str("// A mismatched-types error here: the Rust entry point's signature differs\n");
        s.push_str("// from its mpi.h prototype (quoted above the assertion).\n\n");
        let mut names = Vec::new();
        for f in &self.functions {
            let Some(module) = implemented.get(&f.name) else {
                continue;
            };
            names.push(f.name.clone());
            let sig: Vec<&str> = f.params.iter().map(|p| p.c_type.as_str()).collect();
            let ty = self.fn_type(f);
            writeln!(s, "// {} {}({})", f.ret, f.name, sig.join(", ")).unwrap();
            for prefix in ["P", ""] {
                writeln!(s, "const _: {ty} = {module}::{prefix}{};", f.name).unwrap();
            }
        }
        writeln!(
            s,
            "\n/// Every function whose signature is checked above, in header order.\n#[cfg(test)]\npub const CHECKED: &[&str] = &[{}];",
            names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
        )
        .unwrap();
        writeln!(
            s,
            "/// Every function of mpi.h, in header order.\n#[cfg(test)]\npub const HEADER: &[&str] = &[{}];",
            self.functions
                .iter()
                .map(|f| format!("{:?}", f.name))
                .collect::<Vec<_>>()
                .join(", ")
        )
        .unwrap();
        s
    }

    fn stubs_rs(&self, implemented: &BTreeMap<String, String>) -> String {
        let mut s = String::new();
        s.push_str("// @generated by build.rs from include/mpi.h. Do not edit.\n");
        s.push_str("// One PMPI_X/MPI_X pair for every function of mpi.h that Ferrite does not\n");
        s.push_str(
            "// implement. Each fails with MPI_ERR_UNSUPPORTED_OPERATION, naming itself.\n\n",
        );
        let mut names = Vec::new();
        for f in &self.functions {
            if implemented.contains_key(&f.name) {
                continue;
            }
            names.push(f.name.clone());
            let args = f
                .params
                .iter()
                .map(|p| format!("{}: {}", p.name, p.rust_type))
                .collect::<Vec<_>>()
                .join(", ");
            let call = f
                .params
                .iter()
                .map(|p| p.name.clone())
                .collect::<Vec<_>>()
                .join(", ");
            let (ret, body) = match f.ret.as_str() {
                "int" => ("c_int".to_string(), self.unsupported_body(f)),
                other => {
                    let body = match f.name.as_str() {
                        "MPI_Wtime" => "fallback::wtime()".to_string(),
                        "MPI_Wtick" => "fallback::wtick()".to_string(),
                        "MPI_Aint_add" => "fallback::aint_add(base, disp)".to_string(),
                        "MPI_Aint_diff" => "fallback::aint_diff(addr1, addr2)".to_string(),
                        "MPI_File_c2f" => "fallback::file_c2f(file)".to_string(),
                        "MPI_File_f2c" => "fallback::file_f2c(file)".to_string(),
                        _ => panic!(
                            "build.rs: {} returns {other}; give it a fallback in abi/stubs.rs",
                            f.name
                        ),
                    };
                    (self.rust_type(other, 0, false), body)
                }
            };
            let sig: Vec<&str> = f.params.iter().map(|p| p.c_type.as_str()).collect();
            writeln!(
                s,
                "/// `{} {}({})`: not implemented.",
                f.ret,
                f.name,
                sig.join(", ")
            )
            .unwrap();
            writeln!(s, "#[no_mangle]").unwrap();
            writeln!(
                s,
                "pub extern \"C\" fn P{}({args}) -> {ret} {{\n    {body}\n}}\n",
                f.name
            )
            .unwrap();
            writeln!(s, "/// Forwards to `P{}` (profiling interface).", f.name).unwrap();
            writeln!(s, "#[no_mangle]").unwrap();
            writeln!(
                s,
                "pub extern \"C\" fn {}({args}) -> {ret} {{\n    P{}({call})\n}}\n",
                f.name, f.name
            )
            .unwrap();
        }
        writeln!(
            s,
            "/// Every function that is only a stub, in header order.\npub const STUBBED: &[&str] = &[{}];",
            names
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
        .unwrap();
        s
    }

    /// Raise on the first communicator (or window, or file) argument's handler, else on none.
    fn unsupported_body(&self, f: &Function) -> String {
        for p in &f.params {
            let obj = match p.rust_type.as_str() {
                "MPI_Comm" => format!("ErrObj::Comm({})", p.name),
                "MPI_Win" => format!("ErrObj::Win({})", p.name),
                "MPI_File" => format!("ErrObj::File({} as usize)", p.name),
                _ => continue,
            };
            return format!("unsupported_on({:?}, {obj})", f.name);
        }
        format!("unsupported({:?})", f.name)
    }
}

/// Collects the names of functions implemented in the sources: every `fn MPI_X` or
/// `fn PMPI_X` outside comments that is not a bodiless declaration (`fn MPI_X(..);` in an
/// `extern "C"` block). That covers `mpi_fn!` blocks, hand-written `extern "C" fn`s (for
/// non-int returns) and helper macros that list `fn MPI_X, ...`. Maps each name to the Rust
/// path of the module that defines it (where a macro expands: the file that invokes it).
fn scan_sources(root: &Path, dir: &Path, found: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            scan_sources(root, &p, found);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let mut names = BTreeSet::new();
            scan_text(&text, &mut names);
            let module = module_path(root, &p);
            for n in names {
                if let Some(other) = found.insert(n.clone(), module.clone()) {
                    assert!(
                        other == module,
                        "{n} is defined in both {other} and {module}"
                    );
                }
            }
        }
    }
}

/// `src/abi/comm.rs` -> `crate::abi::comm`, `src/abi/mod.rs` -> `crate::abi`.
fn module_path(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut path = vec!["crate".to_string()];
    for c in rel.components() {
        let c = c.as_os_str().to_str().unwrap();
        if c != "mod" && c != "lib" {
            path.push(c.to_string());
        }
    }
    path.join("::")
}

fn scan_text(text: &str, found: &mut BTreeSet<String>) {
    // Comments (doc examples of mpi_fn!) do not implement anything.
    let text: String = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = text.as_str();
    while let Some(i) = rest.find("fn ") {
        let preceded_by_ident = rest[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let after = rest[i + 3..].trim_start();
        rest = &rest[i + 3..];
        if preceded_by_ident {
            continue;
        }
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..end];
        let name = name.strip_prefix('P').unwrap_or(name);
        if !name.starts_with("MPI_") {
            continue;
        }
        let tail = after[end..].trim_start();
        if tail.starts_with('(') {
            // A signature: a body `{` makes it a definition, `;` a declaration.
            let is_definition = match (tail.find('{'), tail.find(';')) {
                (Some(body), Some(semi)) => body < semi,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if !is_definition {
                continue;
            }
        }
        found.insert(name.to_string());
    }
}
