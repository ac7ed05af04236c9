! np: 1 2 4
! Built with Debian's mpif90.mpich (`use mpi`): MPICH's Fortran library on top of Ferrite's
! libmpi. Point-to-point with statuses, collectives with MPI_IN_PLACE, reductions on Fortran
! types, attributes from Fortran (predefined ones, and a keyval whose copy and delete
! callbacks are Fortran functions, exercised by MPI_Comm_dup and MPI_Comm_free), a
! generalized request with Fortran callbacks, error codes returned through
! MPI_ERRORS_RETURN, and character arguments.
module cb
  use mpi
  implicit none
  integer :: copies = 0, deletes = 0
contains
  subroutine copy_fn(oldcomm, keyval, extra, valin, valout, flag, ierr)
    integer :: oldcomm, keyval, ierr
    integer(kind=MPI_ADDRESS_KIND) :: extra, valin, valout
    logical :: flag
    copies = copies + 1
    valout = valin + extra
    flag = .true.
    ierr = MPI_SUCCESS
  end subroutine
  subroutine delete_fn(comm, keyval, val, extra, ierr)
    integer :: comm, keyval, ierr
    integer(kind=MPI_ADDRESS_KIND) :: val, extra
    deletes = deletes + 1
    ierr = MPI_SUCCESS
  end subroutine
  subroutine query_fn(extra, status, ierr)
    integer(kind=MPI_ADDRESS_KIND) :: extra
    integer :: status(MPI_STATUS_SIZE), ierr
    call MPI_Status_set_elements(status, MPI_INTEGER, 3, ierr)
    call MPI_Status_set_cancelled(status, .false., ierr)
    status(MPI_SOURCE) = 7
    status(MPI_TAG) = int(extra)
    ierr = MPI_SUCCESS
  end subroutine
  subroutine free_fn(extra, ierr)
    integer(kind=MPI_ADDRESS_KIND) :: extra
    integer :: ierr
    ierr = MPI_SUCCESS
  end subroutine
  subroutine cancel_fn(extra, complete, ierr)
    integer(kind=MPI_ADDRESS_KIND) :: extra
    logical :: complete
    integer :: ierr
    ierr = MPI_SUCCESS
  end subroutine
end module

program f_use_mpi
  use mpi
  use cb
  implicit none
  integer :: ierr, rank, nproc, i, keyval, dup, cnt, req, rc, cls, namelen
  integer :: status(MPI_STATUS_SIZE)
  integer(kind=MPI_ADDRESS_KIND) :: val, extra
  logical :: flag
  double precision :: d(4), dd(4)
  integer(kind=8) :: i8(3), i8r(3)
  double complex :: z(2), zr(2)
  double precision :: loc(2), locr(2)
  integer :: ibuf(1), iall(64)
  character(len=MPI_MAX_PROCESSOR_NAME) :: host
  character(len=MPI_MAX_OBJECT_NAME) :: cname

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nproc, ierr)

  ! Predefined attributes come back as values in Fortran.
  call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, val, flag, ierr)
  if (.not. flag .or. val < 32767) call fail('MPI_TAG_UB', int(val))
  call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, val, flag, ierr)
  if (.not. flag .or. (val /= 0 .and. val /= 1)) call fail('MPI_WTIME_IS_GLOBAL', int(val))

  ! A keyval with Fortran callbacks: the copy adds extra_state, delete counts.
  extra = 100
  call MPI_Comm_create_keyval(copy_fn, delete_fn, keyval, extra, ierr)
  val = 12345 + rank
  call MPI_Comm_set_attr(MPI_COMM_WORLD, keyval, val, ierr)
  val = 0
  call MPI_Comm_get_attr(MPI_COMM_WORLD, keyval, val, flag, ierr)
  if (.not. flag .or. val /= 12345 + rank) call fail('get_attr', int(val))
  call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
  if (copies /= 1) call fail('copy callback count', copies)
  call MPI_Comm_get_attr(dup, keyval, val, flag, ierr)
  if (.not. flag .or. val /= 12345 + rank + 100) call fail('copied attribute', int(val))
  call MPI_Comm_free(dup, ierr)
  if (deletes /= 1) call fail('delete callback count', deletes)
  call MPI_Comm_delete_attr(MPI_COMM_WORLD, keyval, ierr)
  if (deletes /= 2) call fail('delete_attr callback count', deletes)
  call MPI_Comm_get_attr(MPI_COMM_WORLD, keyval, val, flag, ierr)
  if (flag) call fail('attribute still there', 0)
  call MPI_Comm_free_keyval(keyval, ierr)

  ! Point-to-point around a ring, with a status.
  d = rank + (/ 0.5d0, 1.5d0, 2.5d0, 3.5d0 /)
  call MPI_Sendrecv(d, 4, MPI_DOUBLE_PRECISION, mod(rank + 1, nproc), 3, dd, 4, &
       MPI_DOUBLE_PRECISION, mod(rank + nproc - 1, nproc), 3, MPI_COMM_WORLD, status, ierr)
  call MPI_Get_count(status, MPI_DOUBLE_PRECISION, cnt, ierr)
  if (cnt /= 4 .or. status(MPI_SOURCE) /= mod(rank + nproc - 1, nproc) .or. status(MPI_TAG) /= 3) &
       call fail('sendrecv status', cnt)
  do i = 1, 4
     if (dd(i) /= mod(rank + nproc - 1, nproc) + i - 0.5d0) call fail('sendrecv data', i)
  end do
  call MPI_Sendrecv(d, 4, MPI_DOUBLE_PRECISION, mod(rank + 1, nproc), 4, dd, 4, &
       MPI_DOUBLE_PRECISION, mod(rank + nproc - 1, nproc), 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)

  ! Reductions on Fortran types, in place and not.
  i8 = (/ int(rank, 8), 2_8**40, -3_8 /)
  call MPI_Allreduce(i8, i8r, 3, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (i8r(1) /= nproc * (nproc - 1) / 2 .or. i8r(2) /= nproc * 2_8**40 .or. i8r(3) /= -3 * nproc) &
       call fail('INTEGER8 sum', int(i8r(1)))
  z = (/ dcmplx(rank, 1), dcmplx(1, -rank) /)
  call MPI_Allreduce(MPI_IN_PLACE, z, 2, MPI_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (z(1) /= dcmplx(nproc * (nproc - 1) / 2, nproc)) call fail('DOUBLE_COMPLEX sum', 1)
  loc = (/ dble(mod(rank * 7, 5)), dble(rank) /)
  call MPI_Allreduce(loc, locr, 1, MPI_2DOUBLE_PRECISION, MPI_MAXLOC, MPI_COMM_WORLD, ierr)
  if (locr(1) /= maxval((/ (dble(mod(i * 7, 5)), i = 0, nproc - 1) /))) call fail('MAXLOC value', 1)
  ibuf = rank
  call MPI_Allgather(ibuf, 1, MPI_INTEGER, iall, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do i = 1, nproc
     if (iall(i) /= i - 1) call fail('allgather', i)
  end do

  ! A generalized request whose callbacks are Fortran subroutines.
  extra = 42
  call MPI_Grequest_start(query_fn, free_fn, cancel_fn, extra, req, ierr)
  call MPI_Grequest_complete(req, ierr)
  call MPI_Wait(req, status, ierr)
  call MPI_Get_count(status, MPI_INTEGER, cnt, ierr)
  if (cnt /= 3 .or. status(MPI_TAG) /= 42 .or. status(MPI_SOURCE) /= 7) call fail('grequest status', cnt)

  ! Errors come back as codes with MPI_ERRORS_RETURN.
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, ierr)
  call MPI_Send(d, 1, MPI_DOUBLE_PRECISION, nproc + 5, 0, MPI_COMM_WORLD, rc)
  call MPI_Error_class(rc, cls, ierr)
  if (cls /= MPI_ERR_RANK) call fail('error class of a bad rank', cls)

  ! Character arguments.
  call MPI_Get_processor_name(host, namelen, ierr)
  if (namelen <= 0 .or. len_trim(host) /= namelen) call fail('processor name length', namelen)
  call MPI_Comm_set_name(MPI_COMM_WORLD, 'fortran world', ierr)
  call MPI_Comm_get_name(MPI_COMM_WORLD, cname, namelen, ierr)
  if (cname /= 'fortran world' .or. namelen /= 13) call fail('comm name', namelen)

  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a)', 'done: f_use_mpi'
  call MPI_Finalize(ierr)
contains
  subroutine fail(what, v)
    character(len=*) :: what
    integer :: v, e
    print '(a,i0,a,a,a,i0)', 'FAILED: rank ', rank, ': ', what, ' ', v
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine
end program
