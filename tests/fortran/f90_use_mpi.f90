! np: 1 2 4
! `use mpi` with the explicit interfaces: a struct type built with MPI_GET_ADDRESS and sent
! from MPI_BOTTOM, indexed and contiguous types, MPI_SIZEOF against MPI_TYPE_SIZE of the
! Fortran datatypes, attributes on a datatype (keyval with MPI_TYPE_DUP_FN) and on a
! communicator (MPI_COMM_NULL_COPY_FN), a user error handler written in Fortran, a
! Cartesian topology (LOGICAL periods, remain_dims), a distributed graph with
! MPI_UNWEIGHTED, MPI_COMM_SPLIT, info strings (a missing key leaves the value as it was).
module handlers
  implicit none
  integer :: calls = 0, lastcode = 0
contains
  subroutine on_error(comm, code)
    integer :: comm, code
    calls = calls + 1
    lastcode = code
  end subroutine
end module

program f90_use_mpi
  use mpi
  use handlers
  implicit none
  type particle
     sequence
     integer :: id
     double precision :: pos(3)
     logical :: alive
  end type
  type(particle) :: p(2), q(2)
  integer :: ierr, rank, nproc, i, sz, msz, ptype, blk(3), types(3), eh, rc, cls
  integer :: keyval, dup, newt, itype, cart, sub, src, dst, coords(2), dims(2), color
  integer :: split, srank, ssize, info, vlen, nkeys
  integer(kind=MPI_ADDRESS_KIND) :: disp(3), base, val, lb, ext
  integer :: status(MPI_STATUS_SIZE)
  logical :: flag, periods(2), remain(2)
  integer :: iarr(10), ires(10), blens(2), displs(2)
  character(len=MPI_MAX_INFO_VAL) :: value
  character(len=MPI_MAX_OBJECT_NAME) :: tname
  real(kind=8) :: r8
  integer(kind=8) :: i8
  complex(kind=8) :: z8
  logical :: lg
  real :: r4

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nproc, ierr)

  ! MPI_SIZEOF agrees with the datatypes' sizes.
  call MPI_Sizeof(r8, msz, ierr)
  call MPI_Type_size(MPI_REAL8, sz, ierr)
  if (msz /= 8 .or. sz /= 8) call fail('REAL8 size', sz)
  call MPI_Sizeof(i8, msz, ierr)
  call MPI_Type_size(MPI_INTEGER8, sz, ierr)
  if (msz /= 8 .or. sz /= 8) call fail('INTEGER8 size', sz)
  call MPI_Sizeof(z8, msz, ierr)
  call MPI_Type_size(MPI_DOUBLE_COMPLEX, sz, ierr)
  if (msz /= 16 .or. sz /= 16) call fail('DOUBLE_COMPLEX size', sz)
  call MPI_Sizeof(lg, msz, ierr)
  call MPI_Type_size(MPI_LOGICAL, sz, ierr)
  if (msz /= 4 .or. sz /= 4) call fail('LOGICAL size', sz)
  call MPI_Sizeof(iarr, msz, ierr)
  if (msz /= 4) call fail('INTEGER array element size', msz)
  call MPI_Sizeof(r4, msz, ierr)
  call MPI_Type_size(MPI_REAL, sz, ierr)
  if (msz /= sz) call fail('REAL size', sz)
  call MPI_Type_size(MPI_2DOUBLE_PRECISION, sz, ierr)
  if (sz /= 16) call fail('2DOUBLE_PRECISION size', sz)
  call MPI_Type_size(MPI_CHARACTER, sz, ierr)
  if (sz /= 1) call fail('CHARACTER size', sz)

  ! A struct type of absolute addresses, sent from MPI_BOTTOM around a ring.
  blk = (/ 1, 3, 1 /)
  types = (/ MPI_INTEGER, MPI_DOUBLE_PRECISION, MPI_LOGICAL /)
  call MPI_Get_address(p(1)%id, disp(1), ierr)
  call MPI_Get_address(p(1)%pos, disp(2), ierr)
  call MPI_Get_address(p(1)%alive, disp(3), ierr)
  call MPI_Get_address(p(1), base, ierr)
  disp = disp - base
  call MPI_Type_create_struct(3, blk, disp, types, ptype, ierr)
  call MPI_Get_address(p(2), val, ierr)
  call MPI_Type_create_resized(ptype, 0_MPI_ADDRESS_KIND, val - base, newt, ierr)
  call MPI_Type_free(ptype, ierr)
  ptype = newt
  call MPI_Type_commit(ptype, ierr)
  call MPI_Type_get_extent(ptype, lb, ext, ierr)
  if (lb /= 0 .or. ext /= val - base) call fail('struct extent', int(ext))
  do i = 1, 2
     p(i)%id = rank * 10 + i
     p(i)%pos = (/ rank + 0.25d0, dble(i), -1d0 /)
     p(i)%alive = mod(rank + i, 2) == 0
  end do
  call MPI_Sendrecv(p, 2, ptype, mod(rank + 1, nproc), 1, q, 2, ptype, &
       mod(rank + nproc - 1, nproc), 1, MPI_COMM_WORLD, status, ierr)
  src = mod(rank + nproc - 1, nproc)
  do i = 1, 2
     if (q(i)%id /= src * 10 + i .or. q(i)%pos(1) /= src + 0.25d0 .or. &
          q(i)%pos(2) /= i .or. (q(i)%alive .neqv. mod(src + i, 2) == 0)) &
          call fail('struct data', i)
  end do
  ! The same from MPI_BOTTOM with absolute displacements.
  call MPI_Get_address(p(1)%id, disp(1), ierr)
  call MPI_Get_address(p(1)%pos, disp(2), ierr)
  call MPI_Get_address(p(1)%alive, disp(3), ierr)
  call MPI_Type_create_struct(3, blk, disp, types, newt, ierr)
  call MPI_Type_commit(newt, ierr)
  q(1)%id = -1
  call MPI_Sendrecv(MPI_BOTTOM, 1, newt, mod(rank + 1, nproc), 2, q, 1, ptype, &
       src, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (q(1)%id /= src * 10 + 1 .or. q(1)%pos(1) /= src + 0.25d0) call fail('MPI_BOTTOM', q(1)%id)
  call MPI_Type_free(newt, ierr)

  ! Indexed: elements 2..3 and 7..10.
  blens = (/ 2, 4 /)
  displs = (/ 1, 6 /)
  call MPI_Type_indexed(2, blens, displs, MPI_INTEGER, itype, ierr)
  call MPI_Type_commit(itype, ierr)
  iarr = (/ (rank * 100 + i, i = 1, 10) /)
  ires = 0
  call MPI_Sendrecv(iarr, 1, itype, mod(rank + 1, nproc), 3, ires, 6, MPI_INTEGER, &
       src, 3, MPI_COMM_WORLD, status, ierr)
  if (ires(1) /= src * 100 + 2 .or. ires(3) /= src * 100 + 7 .or. ires(6) /= src * 100 + 10) &
       call fail('indexed', ires(1))

  ! A datatype attribute copied by MPI_TYPE_DUP_FN, with the type.
  call MPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, keyval, 0_MPI_ADDRESS_KIND, ierr)
  val = 2_MPI_ADDRESS_KIND**40 + rank
  call MPI_Type_set_attr(itype, keyval, val, ierr)
  call MPI_Type_dup(itype, newt, ierr)
  val = 0
  call MPI_Type_get_attr(newt, keyval, val, flag, ierr)
  if (.not. flag .or. val /= 2_MPI_ADDRESS_KIND**40 + rank) call fail('type attribute', int(val))
  call MPI_Type_set_name(newt, '  indexed copy  ', ierr)
  call MPI_Type_get_name(newt, tname, vlen, ierr)
  if (tname /= 'indexed copy' .or. vlen /= 12) call fail('type name', vlen)
  call MPI_Type_free(newt, ierr)
  call MPI_Type_free(itype, ierr)
  call MPI_Type_free_keyval(keyval, ierr)

  ! MPI_COMM_NULL_COPY_FN: not copied by MPI_COMM_DUP.
  call MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, keyval, &
       0_MPI_ADDRESS_KIND, ierr)
  call MPI_Comm_set_attr(MPI_COMM_WORLD, keyval, 5_MPI_ADDRESS_KIND, ierr)
  call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
  call MPI_Comm_get_attr(dup, keyval, val, flag, ierr)
  if (flag) call fail('null copy fn copied', int(val))
  call MPI_Comm_get_attr(MPI_COMM_WORLD, keyval, val, flag, ierr)
  if (.not. flag .or. val /= 5) call fail('comm attribute', int(val))
  call MPI_Comm_free_keyval(keyval, ierr)

  ! A Fortran error handler: called with the code, and the call returns it.
  call MPI_Comm_create_errhandler(on_error, eh, ierr)
  call MPI_Comm_set_errhandler(dup, eh, ierr)
  call MPI_Send(iarr, 1, MPI_INTEGER, nproc + 3, 0, dup, rc)
  call MPI_Error_class(rc, cls, ierr)
  if (calls /= 1 .or. lastcode /= rc .or. cls /= MPI_ERR_RANK) call fail('errhandler', calls)
  call MPI_Comm_call_errhandler(dup, MPI_ERR_OTHER, ierr)
  if (calls /= 2 .or. lastcode /= MPI_ERR_OTHER) call fail('call_errhandler', calls)
  call MPI_Errhandler_free(eh, ierr)
  call MPI_Comm_free(dup, ierr)
  if (dup /= MPI_COMM_NULL) call fail('comm_free', dup)

  ! Cartesian topology: a periodic ring of nproc x 1, then its rows.
  dims = 0
  call MPI_Dims_create(nproc, 2, dims, ierr)
  periods = (/ .true., .false. /)
  call MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, .false., cart, ierr)
  call MPI_Cart_coords(cart, rank, 2, coords, ierr)
  call MPI_Cart_shift(cart, 0, 1, src, dst, ierr)
  if (dims(1) > 1 .and. (src == MPI_PROC_NULL .or. dst == MPI_PROC_NULL)) call fail('periodic shift', src)
  call MPI_Cart_shift(cart, 1, 1, src, dst, ierr)
  if (coords(2) == dims(2) - 1 .and. dst /= MPI_PROC_NULL) call fail('non-periodic shift', dst)
  call MPI_Cart_get(cart, 2, dims, periods, coords, ierr)
  if (.not. periods(1) .or. periods(2)) call fail('cart_get periods', 0)
  remain = (/ .false., .true. /)
  call MPI_Cart_sub(cart, remain, sub, ierr)
  call MPI_Comm_size(sub, ssize, ierr)
  if (ssize /= dims(2)) call fail('cart_sub size', ssize)
  call MPI_Comm_free(sub, ierr)
  call MPI_Comm_free(cart, ierr)

  ! A distributed graph ring without weights (the MPI_UNWEIGHTED sentinel), then with.
  call MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, (/ mod(rank + nproc - 1, nproc) /), &
       MPI_UNWEIGHTED, 1, (/ mod(rank + 1, nproc) /), MPI_UNWEIGHTED, MPI_INFO_NULL, .false., &
       sub, ierr)
  call MPI_Dist_graph_neighbors_count(sub, src, dst, flag, ierr)
  if (src /= 1 .or. dst /= 1 .or. flag) call fail('unweighted dist graph', src)
  call MPI_Comm_free(sub, ierr)
  call MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, (/ mod(rank + nproc - 1, nproc) /), &
       (/ 3 /), 1, (/ mod(rank + 1, nproc) /), (/ 3 /), MPI_INFO_NULL, .false., sub, ierr)
  call MPI_Dist_graph_neighbors_count(sub, src, dst, flag, ierr)
  if (.not. flag) call fail('weighted dist graph', 0)
  call MPI_Comm_free(sub, ierr)

  ! Split into even and odd ranks; sum ranks within each.
  color = mod(rank, 2)
  call MPI_Comm_split(MPI_COMM_WORLD, color, -rank, split, ierr)
  call MPI_Comm_rank(split, srank, ierr)
  call MPI_Comm_size(split, ssize, ierr)
  call MPI_Allreduce(rank, i, 1, MPI_INTEGER, MPI_SUM, split, ierr)
  if (ssize /= (nproc + 1 - color) / 2 .or. srank /= ssize - 1 - rank / 2) call fail('split rank', srank)
  if (i /= sum((/ (2 * i + color, i = 0, ssize - 1) /))) call fail('split sum', i)
  call MPI_Comm_free(split, ierr)

  ! Info strings: blanks around keys and values do not count.
  call MPI_Info_create(info, ierr)
  call MPI_Info_set(info, ' color ', 'blue sky   ', ierr)
  call MPI_Info_get_nkeys(info, nkeys, ierr)
  call MPI_Info_get_valuelen(info, 'color', vlen, flag, ierr)
  call MPI_Info_get(info, 'color', MPI_MAX_INFO_VAL, value, flag, ierr)
  if (nkeys /= 1 .or. .not. flag .or. vlen /= 8 .or. value /= 'blue sky') call fail('info', vlen)
  value = 'untouched'
  call MPI_Info_get(info, 'shape', MPI_MAX_INFO_VAL, value, flag, ierr)
  if (flag .or. value /= 'untouched') call fail('info_get of a missing key', 0)
  call MPI_Info_free(info, ierr)

  call MPI_Type_free(ptype, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a)', 'done: f90_use_mpi'
  call MPI_Finalize(ierr)
contains
  subroutine fail(what, v)
    character(len=*) :: what
    integer :: v, e
    print '(a,i0,a,a,a,i0)', 'FAILED: rank ', rank, ': ', what, ' ', v
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine
end program
