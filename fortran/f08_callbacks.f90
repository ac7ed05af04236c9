! mpi_f08's routines that take procedures (a BIND(C) interface cannot declare a Fortran
! procedure argument) and the predefined attribute callbacks. Each routine calls its
! `use mpi` entry point through a helper in f08_helpers.f90, an external procedure compiled
! apart so that its call of mpi_op_create etc. has an implicit interface.
MODULE mpi_f08_callbacks
  USE mpi_f08_types
  IMPLICIT NONE
  ! The predefined callbacks: the library's procedures with Fortran semantics. The
  ! handle arguments are TYPE(MPI_Comm) etc., passed like the INTEGER handles.
  EXTERNAL :: MPI_COMM_DUP_FN, MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN
  EXTERNAL :: MPI_TYPE_DUP_FN, MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN
  EXTERNAL :: MPI_WIN_DUP_FN, MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN
  EXTERNAL :: MPI_CONVERSION_FN_NULL
  EXTERNAL :: ferrite_f08_op_create, ferrite_f08_keyval_create
  EXTERNAL :: ferrite_f08_errhandler_create
CONTAINS
  SUBROUTINE MPI_Op_create(user_fn, commute, op, ierror)
    EXTERNAL :: user_fn
    LOGICAL, INTENT(IN) :: commute
    TYPE(MPI_Op), INTENT(OUT) :: op
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    INTEGER :: ierr
    CALL ferrite_f08_op_create(user_fn, commute, op%MPI_VAL, ierr)
    IF (PRESENT(ierror)) ierror = ierr
  END SUBROUTINE MPI_Op_create

  SUBROUTINE MPI_Comm_create_keyval(comm_copy_attr_fn, comm_delete_attr_fn, comm_keyval, &
      extra_state, ierror)
    EXTERNAL :: comm_copy_attr_fn, comm_delete_attr_fn
    INTEGER, INTENT(OUT) :: comm_keyval
    INTEGER(KIND=MPI_ADDRESS_KIND), INTENT(IN) :: extra_state
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    INTEGER :: ierr
    CALL ferrite_f08_keyval_create(0, comm_copy_attr_fn, comm_delete_attr_fn, comm_keyval, &
        extra_state, ierr)
    IF (PRESENT(ierror)) ierror = ierr
  END SUBROUTINE MPI_Comm_create_keyval

  SUBROUTINE MPI_Type_create_keyval(type_copy_attr_fn, type_delete_attr_fn, type_keyval, &
      extra_state, ierror)
    EXTERNAL :: type_copy_attr_fn, type_delete_attr_fn
    INTEGER, INTENT(OUT) :: type_keyval
    INTEGER(KIND=MPI_ADDRESS_KIND), INTENT(IN) :: extra_state
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    INTEGER :: ierr
    CALL ferrite_f08_keyval_create(1, type_copy_attr_fn, type_delete_attr_fn, type_keyval, &
        extra_state, ierr)
    IF (PRESENT(ierror)) ierror = ierr
  END SUBROUTINE MPI_Type_create_keyval

  SUBROUTINE MPI_Win_create_keyval(win_copy_attr_fn, win_delete_attr_fn, win_keyval, &
      extra_state, ierror)
    EXTERNAL :: win_copy_attr_fn, win_delete_attr_fn
    INTEGER, INTENT(OUT) :: win_keyval
    INTEGER(KIND=MPI_ADDRESS_KIND), INTENT(IN) :: extra_state
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    INTEGER :: ierr
    CALL ferrite_f08_keyval_create(2, win_copy_attr_fn, win_delete_attr_fn, win_keyval, &
        extra_state, ierr)
    IF (PRESENT(ierror)) ierror = ierr
  END SUBROUTINE MPI_Win_create_keyval

  SUBROUTINE MPI_Comm_create_errhandler(comm_errhandler_fn, errhandler, ierror)
    EXTERNAL :: comm_errhandler_fn
    TYPE(MPI_Errhandler), INTENT(OUT) :: errhandler
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    INTEGER :: ierr
    CALL ferrite_f08_errhandler_create(0, comm_errhandler_fn, errhandler%MPI_VAL, ierr)
    IF (PRESENT(ierror)) ierror = ierr
  END SUBROUTINE MPI_Comm_create_errhandler

  SUBROUTINE MPI_Win_create_errhandler(win_errhandler_fn, errhandler, ierror)
    EXTERNAL :: win_errhandler_fn
    TYPE(MPI_Errhandler), INTENT(OUT) :: errhandler
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    INTEGER :: ierr
    CALL ferrite_f08_errhandler_create(1, win_errhandler_fn, errhandler%MPI_VAL, ierr)
    IF (PRESENT(ierror)) ierror = ierr
  END SUBROUTINE MPI_Win_create_errhandler

  SUBROUTINE MPI_Session_create_errhandler(session_errhandler_fn, errhandler, ierror)
    EXTERNAL :: session_errhandler_fn
    TYPE(MPI_Errhandler), INTENT(OUT) :: errhandler
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    INTEGER :: ierr
    CALL ferrite_f08_errhandler_create(2, session_errhandler_fn, errhandler%MPI_VAL, ierr)
    IF (PRESENT(ierror)) ierror = ierr
  END SUBROUTINE MPI_Session_create_errhandler
END MODULE mpi_f08_callbacks
