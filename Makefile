# Ferrite MPI. `make` builds and installs into $(PREFIX); `make example` runs an example job;
# `make test` runs the whole test suite (what CI runs).
PREFIX ?= $(CURDIR)/build
CARGO ?= cargo
NP ?= 4

LIBDIR := $(PREFIX)/lib
BINDIR := $(PREFIX)/bin
INCDIR := $(PREFIX)/include
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

.PHONY: all build install install-fortran example test deps bench clean

all: install

build:
	$(CARGO) build --release --workspace

install: build install-fortran
	mkdir -p $(LIBDIR) $(BINDIR) $(INCDIR)
	install -m 0755 target/release/libferrite.so $(LIBDIR)/libmpi.so.12
	ln -sf libmpi.so.12 $(LIBDIR)/libmpi.so
	ln -sf libmpi.so.12 $(LIBDIR)/libmpich.so.12
	ln -sf libmpi.so.12 $(LIBDIR)/libmpich.so
	install -m 0644 include/mpi.h $(INCDIR)/mpi.h
	install -m 0755 target/release/mpirun $(BINDIR)/mpirun
	ln -sf mpirun $(BINDIR)/mpiexec
	install -m 0755 target/release/ferrite-info $(BINDIR)/ferrite-info
	sed 's/@FERRITE_VERSION@/$(VERSION)/' tools/mpicc > $(BINDIR)/mpicc && chmod 0755 $(BINDIR)/mpicc
	install -m 0755 tools/mpicxx $(BINDIR)/mpicxx
	ln -sf mpicxx $(BINDIR)/mpic++
	ln -sf mpicxx $(BINDIR)/mpiCC
	mkdir -p $(LIBDIR)/pkgconfig
	for pc in mpi ferrite mpich; do \
	    sed -e 's/@FERRITE_VERSION@/$(VERSION)/' -e "s/@NAME@/$$pc/" tools/mpi.pc.in \
	        > $(LIBDIR)/pkgconfig/$$pc.pc; \
	done

# Fortran bindings (fortran/): generated from include/mpi.h and built with gfortran; skipped
# with a message when there is no Fortran compiler.
FERRITE_FC ?= gfortran
install-fortran: build
	@if ! command -v $(FERRITE_FC) > /dev/null 2>&1; then \
	    echo "install-fortran: $(FERRITE_FC) not found: Fortran bindings skipped (scripts/install-deps.sh installs gfortran)"; \
	else \
	    set -e; \
	    FC=$(FERRITE_FC) fortran/build.sh target/release/libferrite.so target/fortran; \
	    mkdir -p $(LIBDIR) $(BINDIR) $(INCDIR); \
	    install -m 0755 target/fortran/libmpifort.so.12 $(LIBDIR)/libmpifort.so.12; \
	    ln -sf libmpifort.so.12 $(LIBDIR)/libmpifort.so; \
	    install -m 0644 target/fortran/mpif.h target/fortran/mod/*.mod $(INCDIR); \
	    install -m 0755 tools/mpifort $(BINDIR)/mpifort; \
	    ln -sf mpifort $(BINDIR)/mpif90; \
	    ln -sf mpifort $(BINDIR)/mpif77; \
	fi

example: install
	$(BINDIR)/mpicc -O2 -o $(PREFIX)/pi examples/pi.c
	$(BINDIR)/mpirun -n $(NP) $(PREFIX)/pi

deps:
	scripts/install-deps.sh

test: deps install
	PREFIX=$(PREFIX) tests/run.sh

bench: install
	PREFIX=$(PREFIX) bench/run.sh

clean:
	$(CARGO) clean
	rm -rf $(PREFIX)
