! Helpers of mpi_f08_callbacks (see there): external procedures calling the `use mpi` entry
! points with implicit interfaces.
SUBROUTINE ferrite_f08_op_create(fn, commute, op, ierr)
  IMPLICIT NONE
  EXTERNAL :: fn
  LOGICAL :: commute
  INTEGER :: op, ierr
  CALL mpi_op_create(fn, commute, op, ierr)
END SUBROUTINE ferrite_f08_op_create

SUBROUTINE ferrite_f08_keyval_create(which, copy_fn, delete_fn, keyval, extra_state, ierr)
  IMPLICIT NONE
  EXTERNAL :: copy_fn, delete_fn
  INTEGER :: which, keyval, ierr
  INTEGER(KIND=8) :: extra_state
  SELECT CASE (which)
  CASE (0)
    CALL mpi_comm_create_keyval(copy_fn, delete_fn, keyval, extra_state, ierr)
  CASE (1)
    CALL mpi_type_create_keyval(copy_fn, delete_fn, keyval, extra_state, ierr)
  CASE DEFAULT
    CALL mpi_win_create_keyval(copy_fn, delete_fn, keyval, extra_state, ierr)
  END SELECT
END SUBROUTINE ferrite_f08_keyval_create

SUBROUTINE ferrite_f08_errhandler_create(which, fn, errhandler, ierr)
  IMPLICIT NONE
  EXTERNAL :: fn
  INTEGER :: which, errhandler, ierr
  SELECT CASE (which)
  CASE (0)
    CALL mpi_comm_create_errhandler(fn, errhandler, ierr)
  CASE (1)
    CALL mpi_win_create_errhandler(fn, errhandler, ierr)
  CASE DEFAULT
    CALL mpi_session_create_errhandler(fn, errhandler, ierr)
  END SELECT
END SUBROUTINE ferrite_f08_errhandler_create
