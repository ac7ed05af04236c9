! np: 1 2 3
! Built with Debian's mpif90.mpich through mpif.h (no module): MPI-1 attributes
! (MPI_ATTR_PUT/GET: INTEGER values), a user reduction written in Fortran, a derived
! vector type, MPI_BOTTOM-free nonblocking exchange with MPI_Waitall and MPI_STATUSES_IGNORE.
subroutine myprod(invec, inoutvec, len, dtype)
  implicit none
  integer :: len, dtype, i
  double precision :: invec(len), inoutvec(len)
  do i = 1, len
     inoutvec(i) = inoutvec(i) * invec(i)
  end do
end subroutine

program f_mpifh
  implicit none
  include 'mpif.h'
  external myprod
  integer :: ierr, rank, nproc, keyval, ival, op, vtype, i, j, reqs(2)
  logical :: flag
  double precision :: x(3), y(3), m(4, 3), col(3)
  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nproc, ierr)

  call MPI_KEYVAL_CREATE(MPI_NULL_COPY_FN, MPI_NULL_DELETE_FN, keyval, 0, ierr)
  call MPI_ATTR_PUT(MPI_COMM_WORLD, keyval, 777 + rank, ierr)
  ival = 0
  call MPI_ATTR_GET(MPI_COMM_WORLD, keyval, ival, flag, ierr)
  if (.not. flag .or. ival /= 777 + rank) call fail('MPI_ATTR_GET', ival)
  call MPI_ATTR_GET(MPI_COMM_WORLD, MPI_TAG_UB, ival, flag, ierr)
  if (.not. flag .or. ival < 32767) call fail('MPI_TAG_UB', ival)
  call MPI_ATTR_DELETE(MPI_COMM_WORLD, keyval, ierr)
  call MPI_KEYVAL_FREE(keyval, ierr)

  call MPI_OP_CREATE(myprod, .true., op, ierr)
  x = (/ dble(rank + 1), 2.0d0, -1.0d0 /)
  call MPI_ALLREDUCE(x, y, 3, MPI_DOUBLE_PRECISION, op, MPI_COMM_WORLD, ierr)
  if (y(1) /= product((/ (dble(i), i = 1, nproc) /)) .or. y(2) /= 2.0d0**nproc &
       .or. y(3) /= (-1.0d0)**nproc) call fail('user op', nproc)
  call MPI_OP_FREE(op, ierr)

  ! Row 2 of a 4x3 column-major matrix: a vector type of stride 4.
  call MPI_TYPE_VECTOR(3, 1, 4, MPI_DOUBLE_PRECISION, vtype, ierr)
  call MPI_TYPE_COMMIT(vtype, ierr)
  do j = 1, 3
     do i = 1, 4
        m(i, j) = rank * 100 + i * 10 + j
     end do
  end do
  call MPI_IRECV(col, 3, MPI_DOUBLE_PRECISION, mod(rank + nproc - 1, nproc), 9, MPI_COMM_WORLD, &
       reqs(1), ierr)
  call MPI_ISEND(m(2, 1), 1, vtype, mod(rank + 1, nproc), 9, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_WAITALL(2, reqs, MPI_STATUSES_IGNORE, ierr)
  do j = 1, 3
     if (col(j) /= mod(rank + nproc - 1, nproc) * 100 + 20 + j) call fail('vector row', j)
  end do
  call MPI_TYPE_FREE(vtype, ierr)

  call MPI_BARRIER(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a)', 'done: f_mpifh'
  call MPI_FINALIZE(ierr)
contains
  subroutine fail(what, v)
    character(len=*) :: what
    integer :: v, e
    print '(a,i0,a,a,a,i0)', 'FAILED: rank ', rank, ': ', what, ' ', v
    call MPI_ABORT(MPI_COMM_WORLD, 1, e)
  end subroutine
end program
