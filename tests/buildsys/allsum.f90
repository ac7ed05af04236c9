! The Fortran twin of allsum.c, built only when <prefix>/bin/mpifort exists.
program allsum
    implicit none
    include 'mpif.h'
    integer :: rank, size, ierr
    integer(kind=8) :: mine, total
    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
    mine = rank + 1
    call MPI_Allreduce(mine, total, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (rank == 0) print '(a,i0,a,i0)', 'Fortran size=', size, ' sum=', total
    call MPI_Finalize(ierr)
end program allsum
