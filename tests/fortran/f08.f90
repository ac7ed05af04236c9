! np: 1 2 4
! `use mpi_f08`: handle types and their comparison, TYPE(MPI_Status) fields, optional
! ierror, nonblocking exchange with MPI_Waitall / MPI_Testall and MPI_STATUSES_IGNORE,
! collectives (bcast, allreduce in place on INTEGER, REAL64, COMPLEX(REAL64), LOGICAL,
! MAXLOC on MPI_2DOUBLE_PRECISION, alltoall, scan), a vector type, a user reduction,
! attributes (keyval with a Fortran copy callback), MPI_Comm_split, strings, MPI_Wtime,
! a session (process set names, a communicator from a group).
module f08_ops
  use mpi_f08
  implicit none
  integer :: copies = 0
contains
  subroutine maxabs(invec, inoutvec, len, datatype)
    integer :: len
    double precision :: invec(len), inoutvec(len)
    type(MPI_Datatype) :: datatype
    integer :: i
    do i = 1, len
       inoutvec(i) = max(abs(invec(i)), abs(inoutvec(i)))
    end do
  end subroutine
  subroutine copy_twice(oldcomm, keyval, extra, valin, valout, flag, ierror)
    type(MPI_Comm) :: oldcomm
    integer :: keyval, ierror
    integer(kind=MPI_ADDRESS_KIND) :: extra, valin, valout
    logical :: flag
    copies = copies + 1
    valout = valin * 2 + extra
    flag = .true.
    ierror = MPI_SUCCESS
  end subroutine
end module

program f08
  use mpi_f08
  use f08_ops
  use, intrinsic :: iso_fortran_env, only: real64, int64
  implicit none
  type(MPI_Comm) :: comm, split
  type(MPI_Request) :: reqs(2)
  type(MPI_Status) :: status, stats(2)
  type(MPI_Datatype) :: vec
  type(MPI_Op) :: op
  integer :: rank, nproc, ierr, i, left, right, cnt, keyval, namelen, srank, ssize
  integer :: ibuf(4), ires(4), a2a(64), r2a(64)
  real(real64) :: d(3), m(3, 4), row(4), t0, loc(2)
  complex(real64) :: z
  logical :: l(2), flag
  integer(kind=MPI_ADDRESS_KIND) :: val
  character(len=MPI_MAX_PROCESSOR_NAME) :: host
  character(len=MPI_MAX_OBJECT_NAME) :: cname
  type(MPI_Session) :: session
  type(MPI_Group) :: group
  integer :: npsets, psetlen
  logical :: found
  character(len=MPI_MAX_PSET_NAME_LEN) :: pset

  call MPI_Init()
  t0 = MPI_Wtime()
  comm = MPI_COMM_WORLD
  if (comm /= MPI_COMM_WORLD .or. .not. (comm == MPI_COMM_WORLD)) call fail('handle compare', 0)
  call MPI_Comm_rank(comm, rank)
  call MPI_Comm_size(comm, nproc, ierr)
  if (ierr /= MPI_SUCCESS) call fail('ierror', ierr)
  right = mod(rank + 1, nproc)
  left = mod(rank + nproc - 1, nproc)

  ! Blocking exchange with a status.
  ibuf = (/ (rank * 4 + i, i = 1, 4) /)
  call MPI_Sendrecv(ibuf, 4, MPI_INTEGER, right, 5, ires, 4, MPI_INTEGER, left, 5, comm, status)
  call MPI_Get_count(status, MPI_INTEGER, cnt)
  if (status%MPI_SOURCE /= left .or. status%MPI_TAG /= 5 .or. cnt /= 4) call fail('status', cnt)
  if (any(ires /= (/ (left * 4 + i, i = 1, 4) /))) call fail('sendrecv data', ires(1))

  ! Nonblocking.
  ires = -1
  call MPI_Irecv(ires, 4, MPI_INTEGER, left, 6, comm, reqs(1))
  call MPI_Isend(ibuf, 4, MPI_INTEGER, right, 6, comm, reqs(2))
  call MPI_Waitall(2, reqs, stats)
  if (stats(1)%MPI_SOURCE /= left .or. reqs(1) /= MPI_REQUEST_NULL) call fail('waitall', 0)
  if (any(ires /= (/ (left * 4 + i, i = 1, 4) /))) call fail('irecv data', ires(1))
  call MPI_Irecv(ires, 4, MPI_INTEGER, MPI_ANY_SOURCE, 7, comm, reqs(1))
  call MPI_Isend(ibuf, 4, MPI_INTEGER, right, 7, comm, reqs(2))
  flag = .false.
  do while (.not. flag)
     call MPI_Testall(2, reqs, flag, MPI_STATUSES_IGNORE)
  end do
  call MPI_Wait(reqs(1), MPI_STATUS_IGNORE)

  ! Collectives.
  d = 0
  if (rank == 0) d = (/ 1d0, 2d0, 3d0 /)
  call MPI_Bcast(d, 3, MPI_DOUBLE_PRECISION, 0, comm)
  if (any(d /= (/ 1d0, 2d0, 3d0 /))) call fail('bcast', 0)
  ibuf = rank
  call MPI_Allreduce(MPI_IN_PLACE, ibuf, 4, MPI_INTEGER, MPI_SUM, comm)
  if (any(ibuf /= nproc * (nproc - 1) / 2)) call fail('allreduce in place', ibuf(1))
  d = (/ dble(rank), -dble(rank), 0.5d0 /)
  call MPI_Allreduce(MPI_IN_PLACE, d, 3, MPI_REAL8, MPI_MIN, comm)
  if (d(1) /= 0 .or. d(2) /= -(nproc - 1) .or. d(3) /= 0.5d0) call fail('REAL8 min', 0)
  z = cmplx(rank, 1, kind=real64)
  call MPI_Allreduce(MPI_IN_PLACE, z, 1, MPI_DOUBLE_COMPLEX, MPI_PROD, comm)
  if (nproc == 2 .and. z /= cmplx(0, 1, kind=real64) * cmplx(1, 1, kind=real64)) call fail('complex prod', 0)
  l = (/ rank == nproc - 1, .false. /)
  call MPI_Allreduce(MPI_IN_PLACE, l, 2, MPI_LOGICAL, MPI_LXOR, comm)
  if (.not. l(1) .or. l(2)) call fail('LOGICAL lxor', 0)
  loc = (/ dble(mod(rank + 1, nproc)), dble(rank) /)
  call MPI_Allreduce(MPI_IN_PLACE, loc, 1, MPI_2DOUBLE_PRECISION, MPI_MAXLOC, comm)
  if (loc(1) /= nproc - 1 .or. loc(2) /= mod(nproc - 2 + nproc, nproc)) call fail('maxloc', int(loc(2)))
  do i = 1, nproc
     a2a(i) = rank * 1000 + i
  end do
  call MPI_Alltoall(a2a, 1, MPI_INTEGER, r2a, 1, MPI_INTEGER, comm)
  do i = 1, nproc
     if (r2a(i) /= (i - 1) * 1000 + rank + 1) call fail('alltoall', i)
  end do
  call MPI_Scan(rank + 1, i, 1, MPI_INTEGER, MPI_SUM, comm)
  if (i /= (rank + 1) * (rank + 2) / 2) call fail('scan', i)

  ! A user reduction.
  call MPI_Op_create(maxabs, .true., op)
  d = (/ -dble(rank), 1d0, dble(rank) / 2 /)
  call MPI_Allreduce(MPI_IN_PLACE, d, 3, MPI_DOUBLE_PRECISION, op, comm)
  if (d(1) /= nproc - 1 .or. d(2) /= 1) call fail('user op', int(d(1)))
  call MPI_Op_free(op)
  if (op /= MPI_OP_NULL) call fail('op_free', 0)

  ! Row 2 of a 3x4 matrix as a vector type.
  call MPI_Type_vector(4, 1, 3, MPI_DOUBLE_PRECISION, vec)
  call MPI_Type_commit(vec)
  m = reshape((/ (dble(rank * 100 + i), i = 1, 12) /), (/ 3, 4 /))
  call MPI_Sendrecv(m(2, 1), 1, vec, right, 8, row, 4, MPI_DOUBLE_PRECISION, left, 8, &
       comm, MPI_STATUS_IGNORE)
  do i = 1, 4
     if (row(i) /= left * 100 + 2 + (i - 1) * 3) call fail('vector', i)
  end do
  call MPI_Type_free(vec)

  ! Attributes through a Fortran copy callback.
  call MPI_Comm_create_keyval(copy_twice, MPI_COMM_NULL_DELETE_FN, keyval, 7_MPI_ADDRESS_KIND)
  call MPI_Comm_set_attr(comm, keyval, int(rank + 1, MPI_ADDRESS_KIND))
  call MPI_Comm_dup(comm, split)
  call MPI_Comm_get_attr(split, keyval, val, flag)
  if (.not. flag .or. val /= 2 * (rank + 1) + 7 .or. copies /= 1) call fail('f08 attribute', int(val))
  call MPI_Comm_free(split)
  call MPI_Comm_free_keyval(keyval)
  call MPI_Comm_get_attr(comm, MPI_TAG_UB, val, flag)
  if (.not. flag .or. val < 32767) call fail('MPI_TAG_UB', int(val))

  ! Split in halves.
  call MPI_Comm_split(comm, merge(0, 1, rank < nproc / 2), rank, split)
  call MPI_Comm_rank(split, srank)
  call MPI_Comm_size(split, ssize)
  if (srank /= merge(rank, rank - nproc / 2, rank < nproc / 2)) call fail('split', srank)
  call MPI_Comm_free(split)

  call MPI_Get_processor_name(host, namelen)
  if (namelen <= 0 .or. len_trim(host) /= namelen) call fail('processor name', namelen)
  call MPI_Comm_set_name(MPI_COMM_SELF, 'f08 self')
  call MPI_Comm_get_name(MPI_COMM_SELF, cname, namelen)
  if (cname /= 'f08 self' .or. namelen /= 8) call fail('comm name', namelen)
  if (MPI_Wtime() < t0) call fail('wtime', 0)

  ! A session: its process sets by name, a communicator from mpi://WORLD.
  call MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, session)
  call MPI_Session_get_num_psets(session, MPI_INFO_NULL, npsets)
  found = .false.
  do i = 0, npsets - 1
     psetlen = len(pset)
     call MPI_Session_get_nth_pset(session, MPI_INFO_NULL, i, psetlen, pset)
     if (pset == 'mpi://WORLD') found = .true.
  end do
  if (.not. found) call fail('mpi://WORLD not among the process sets', npsets)
  call MPI_Group_from_session_pset(session, 'mpi://WORLD', group)
  call MPI_Comm_create_from_group(group, 'ferrite.f08', MPI_INFO_NULL, MPI_ERRORS_RETURN, split)
  call MPI_Comm_size(split, ssize)
  if (ssize /= nproc) call fail('session communicator size', ssize)
  call MPI_Comm_free(split)
  call MPI_Group_free(group)
  call MPI_Session_finalize(session)

  call MPI_Barrier(comm)
  if (rank == 0) print '(a)', 'done: f08'
  call MPI_Finalize()
contains
  subroutine fail(what, v)
    character(len=*) :: what
    integer :: v
    print '(a,i0,a,a,a,i0)', 'FAILED: rank ', rank, ': ', what, ' ', v
    call MPI_Abort(MPI_COMM_WORLD, 1)
  end subroutine
end program
