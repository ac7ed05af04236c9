! np: 1 2 4
! Fixed-form FORTRAN 77 with mpif.h: nonblocking ring with MPI_WAITANY (1-based
! indices) and statuses, MPI_WAITSOME, broadcast, reductions on INTEGER, REAL*8,
! LOGICAL (LAND, LOR), MAXLOC on 2DOUBLE_PRECISION, MINLOC on 2INTEGER and 2REAL,
! MPI_IN_PLACE at the root of a reduce, gather, MPI_ERROR_STRING, MPI_WTIME.
      PROGRAM F77FIX
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER IERR, RANK, NP, LEFT, RIGHT, I, IDX, CNT, RLEN
      INTEGER REQS(2), STAT(MPI_STATUS_SIZE), STATS(MPI_STATUS_SIZE,2)
      INTEGER IDXS(2), NDONE
      INTEGER IBUF(5), IRES(5), ALLR(64)
      DOUBLE PRECISION D(3), DR(3), P(2), PR(2), T0
      REAL R(2), RR(2)
      INTEGER PI(2), PIR(2)
      LOGICAL L(2), LR(2)
      CHARACTER*(MPI_MAX_ERROR_STRING) MSG
      CALL MPI_INIT(IERR)
      CALL MPI_COMM_RANK(MPI_COMM_WORLD, RANK, IERR)
      CALL MPI_COMM_SIZE(MPI_COMM_WORLD, NP, IERR)
      T0 = MPI_WTIME()
      RIGHT = MOD(RANK + 1, NP)
      LEFT = MOD(RANK + NP - 1, NP)
! Ring: the receive is request 1, the send request 2.
      DO I = 1, 5
         IBUF(I) = RANK * 10 + I
      END DO
      CALL MPI_IRECV(IRES, 5, MPI_INTEGER, LEFT, 7, MPI_COMM_WORLD,
     &               REQS(1), IERR)
      CALL MPI_ISEND(IBUF, 5, MPI_INTEGER, RIGHT, 7, MPI_COMM_WORLD,
     &               REQS(2), IERR)
      CNT = 0
      DO I = 1, 2
         CALL MPI_WAITANY(2, REQS, IDX, STAT, IERR)
         IF (IDX .LT. 1 .OR. IDX .GT. 2) CALL FAIL('waitany index', IDX)
         IF (REQS(IDX) .NE. MPI_REQUEST_NULL) CALL FAIL('req', IDX)
         IF (IDX .EQ. 1) THEN
            IF (STAT(MPI_SOURCE) .NE. LEFT) CALL FAIL('source', LEFT)
            IF (STAT(MPI_TAG) .NE. 7) CALL FAIL('tag', STAT(MPI_TAG))
            CALL MPI_GET_COUNT(STAT, MPI_INTEGER, CNT, IERR)
         END IF
      END DO
      IF (CNT .NE. 5) CALL FAIL('count', CNT)
      DO I = 1, 5
         IF (IRES(I) .NE. LEFT * 10 + I) CALL FAIL('ring data', I)
      END DO
! The same with MPI_WAITSOME.
      CALL MPI_IRECV(IRES, 5, MPI_INTEGER, LEFT, 8, MPI_COMM_WORLD,
     &               REQS(1), IERR)
      CALL MPI_ISEND(IBUF, 5, MPI_INTEGER, RIGHT, 8, MPI_COMM_WORLD,
     &               REQS(2), IERR)
      CNT = 0
      DO WHILE (CNT .LT. 2)
         CALL MPI_WAITSOME(2, REQS, NDONE, IDXS, STATS, IERR)
         DO I = 1, NDONE
            IF (IDXS(I) .LT. 1 .OR. IDXS(I) .GT. 2)
     &         CALL FAIL('waitsome index', IDXS(I))
         END DO
         CNT = CNT + NDONE
      END DO
! Broadcast from the last rank.
      IF (RANK .EQ. NP - 1) THEN
         D(1) = 1.5D0
         D(2) = -2.25D0
         D(3) = 1.0D100
      END IF
      CALL MPI_BCAST(D, 3, MPI_DOUBLE_PRECISION, NP - 1,
     &               MPI_COMM_WORLD, IERR)
      IF (D(1) .NE. 1.5D0 .OR. D(2) .NE. -2.25D0 .OR. D(3) .NE. 1.0D100)
     &   CALL FAIL('bcast', 0)
! INTEGER sum to rank 0 with MPI_IN_PLACE there; REAL*8 max everywhere.
      DO I = 1, 5
         IRES(I) = RANK + I
      END DO
      IF (RANK .EQ. 0) THEN
         CALL MPI_REDUCE(MPI_IN_PLACE, IRES, 5, MPI_INTEGER, MPI_SUM, 0,
     &                   MPI_COMM_WORLD, IERR)
         DO I = 1, 5
            IF (IRES(I) .NE. NP * (NP - 1) / 2 + NP * I)
     &         CALL FAIL('in-place reduce', I)
         END DO
      ELSE
         CALL MPI_REDUCE(IRES, IRES, 5, MPI_INTEGER, MPI_SUM, 0,
     &                   MPI_COMM_WORLD, IERR)
      END IF
      D(1) = RANK * 0.5D0
      D(2) = -RANK
      D(3) = 3.0D0
      CALL MPI_ALLREDUCE(D, DR, 3, MPI_REAL8, MPI_MAX, MPI_COMM_WORLD,
     &                   IERR)
      IF (DR(1) .NE. (NP - 1) * 0.5D0 .OR. DR(2) .NE. 0D0 .OR.
     &    DR(3) .NE. 3D0) CALL FAIL('REAL8 max', 0)
! LOGICAL: L(1) true only on rank 0, L(2) true everywhere.
      L(1) = RANK .EQ. 0
      L(2) = .TRUE.
      CALL MPI_ALLREDUCE(L, LR, 2, MPI_LOGICAL, MPI_LAND,
     &                   MPI_COMM_WORLD, IERR)
      IF (LR(1) .NEQV. (NP .EQ. 1) .OR. .NOT. LR(2))
     &   CALL FAIL('LOGICAL land', 0)
      CALL MPI_ALLREDUCE(L, LR, 2, MPI_LOGICAL, MPI_LOR,
     &                   MPI_COMM_WORLD, IERR)
      IF (.NOT. LR(1) .OR. .NOT. LR(2)) CALL FAIL('LOGICAL lor', 0)
! Value-index pairs.
      P(1) = MOD(RANK * 3, 4)
      P(2) = RANK
      CALL MPI_ALLREDUCE(P, PR, 1, MPI_2DOUBLE_PRECISION, MPI_MAXLOC,
     &                   MPI_COMM_WORLD, IERR)
      CNT = 0
      DO I = 0, NP - 1
         IF (MOD(I * 3, 4) .GT. MOD(CNT * 3, 4)) CNT = I
      END DO
      IF (PR(1) .NE. MOD(CNT * 3, 4) .OR. PR(2) .NE. CNT)
     &   CALL FAIL('2DOUBLE_PRECISION maxloc', INT(PR(2)))
      PI(1) = 100 - RANK
      PI(2) = RANK
      CALL MPI_ALLREDUCE(PI, PIR, 1, MPI_2INTEGER, MPI_MINLOC,
     &                   MPI_COMM_WORLD, IERR)
      IF (PIR(1) .NE. 101 - NP .OR. PIR(2) .NE. NP - 1)
     &   CALL FAIL('2INTEGER minloc', PIR(2))
      R(1) = 5.0
      R(2) = RANK
      CALL MPI_ALLREDUCE(R, RR, 1, MPI_2REAL, MPI_MINLOC,
     &                   MPI_COMM_WORLD, IERR)
      IF (RR(1) .NE. 5.0 .OR. RR(2) .NE. 0.0)
     &   CALL FAIL('2REAL minloc ties', INT(RR(2)))
! Gather ranks at the root.
      CALL MPI_GATHER(RANK, 1, MPI_INTEGER, ALLR, 1, MPI_INTEGER, 0,
     &                MPI_COMM_WORLD, IERR)
      IF (RANK .EQ. 0) THEN
         DO I = 1, NP
            IF (ALLR(I) .NE. I - 1) CALL FAIL('gather', I)
         END DO
      END IF
      CALL MPI_ERROR_STRING(MPI_ERR_TRUNCATE, MSG, RLEN, IERR)
      IF (RLEN .LE. 0 .OR. RLEN .NE. LEN_TRIM(MSG) .OR.
     &    MSG(RLEN+1:RLEN+1) .NE. ' ') CALL FAIL('error string', RLEN)
      IF (MPI_WTIME() .LT. T0 .OR. MPI_WTICK() .LE. 0D0)
     &   CALL FAIL('wtime', 0)
      CALL MPI_BARRIER(MPI_COMM_WORLD, IERR)
      IF (RANK .EQ. 0) PRINT '(A)', 'done: f77_fixed'
      CALL MPI_FINALIZE(IERR)
      END

      SUBROUTINE FAIL(WHAT, V)
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      CHARACTER*(*) WHAT
      INTEGER V, E, RANK
      CALL MPI_COMM_RANK(MPI_COMM_WORLD, RANK, E)
      PRINT '(A,I0,A,A,A,I0)', 'FAILED: rank ', RANK, ': ', WHAT, ' ', V
      CALL MPI_ABORT(MPI_COMM_WORLD, 1, E)
      END
