#!/usr/bin/env python3
"""Fails when a `crate::` path in crates/ferrite/src goes up a layer (docs/architecture.md,
"Layers inside the library"). Each source file belongs to the longest prefix in LAYERS that
matches its path under src/; it may name files of its own layer or below. KNOWN lists the
upward imports left today (each with why); it may only shrink. Comment lines are skipped.
Runs a self-test first. Ends with `layers: N passed, N failed`."""
import os, re, sys

LAYERS = [  # (path prefix under src/, layer): higher is nearer the user
    ("lib.rs", 6), ("bin/", 6), ("abi/", 6),
    ("io/", 6),  # MPI-IO calls the entry points like a user (ROMIO's way)
    ("objects/", 5), ("coll/", 5), ("rma/", 5), ("p2p/", 5), ("state.rs", 5),
    ("progress.rs", 5), ("progress_thread.rs", 5), ("error.rs", 5),
    ("tool/", 5),  # MPI_T's registry: reads the state's counters, sets knobs
    ("runtime/mod.rs", 5), ("runtime/report.rs", 5),  # the runtime's glue to the state
    ("transport/", 3),
    ("conn/", 2),
    ("runtime/", 1),  # configuration registry, PMI client: transports use them
    ("consts.rs", 0), ("types.rs", 0), ("fxhash.rs", 0), ("lock_order.rs", 0),
]
KNOWN = [  # (from prefix, to prefix)
    # objects/errhandler.rs resolves file error handlers through io's table.
    ("objects/", "io/"),
    # The ofi transport still makes MpiErrors (error.rs) inside, converted to the transports'
    # own error at its trait methods, and reads the job secret through runtime/mod.rs's
    # re-export (not yet converted).
    ("transport/ofi/", "error.rs"), ("transport/ofi/", "runtime/mod.rs"),
    # The progress engine's hook that advances MPI-IO's collective accesses in the background
    # (io/engine.rs): io sits above the core because its entry points call MPI as ROMIO does,
    # but its nonblocking collectives are driven from below, like coll's schedules.
    ("progress.rs", "io/engine.rs"),
]
MACROS = {"mpi_err": "error.rs", "terr": "transport/error.rs", "mpi_fn": "abi/macros.rs", "twins": "abi/macros.rs",
          "mpi_fn_each": "abi/macros.rs"}


def layer(path):
    best = None
    for p, l in LAYERS:
        if path.startswith(p) and (best is None or len(p) > len(best[0])):
            best = (p, l)
    return best


def resolve(src, segs):
    if segs[0] in MACROS:
        return MACROS[segs[0]]
    d = ""
    for s in segs:
        cand = d + s
        if os.path.isfile(os.path.join(src, cand + ".rs")):
            return cand + ".rs"
        if not os.path.isdir(os.path.join(src, cand)):
            break
        d = cand + "/"
    if d and os.path.isfile(os.path.join(src, d + "mod.rs")):
        return d + "mod.rs"
    return d or segs[0]


def upward(src, rel, text):
    me = layer(rel)
    if me is None:
        return [("%s is in no layer" % rel, 0)]
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("//"):
            continue
        for m in re.finditer(r"crate::((?:[a-z_0-9]+::)*[a-z_0-9]+)", line):
            target = resolve(src, m.group(1).split("::"))
            theirs = layer(target)
            if theirs is None:
                bad.append(("%s (in no layer)" % target, n))
            elif theirs[1] > me[1] and not any(
                    rel.startswith(f) and target.startswith(t) for f, t in KNOWN):
                bad.append((target, n))
    return bad


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = os.path.join(root, "crates", "ferrite", "src")
    passed = failed = 0
    # Self-test: the check catches what it is for and lets the rest through.
    cases = [
        ("conn/policy.rs", "use crate::transport::Proc;", 1),
        ("transport/udp/mod.rs", "use crate::abi::consts::X;", 1),
        ("transport/udp/mod.rs", "use crate::error::MpiResult;", 1),
        ("transport/udp/mod.rs", "use crate::terr;", 0),
        ("runtime/pmi.rs", "crate::mpi_err!(X, \"y\")", 1),
        ("conn/manager.rs", "use crate::p2p::P2p;", 1),
        ("transport/tcp/mod.rs", "use crate::conn::manager::Manager;", 0),
        ("conn/wire.rs", "use crate::types::Proc; use crate::consts::MPI_ERR_OTHER;", 0),
        ("conn/wire.rs", "// see crate::transport::tcp", 0),
        ("p2p/protocol.rs", "use crate::objects::comm::Comm;", 0),
    ]
    for rel, text, want in cases:
        got = len(upward(src, rel, text))
        if got == want:
            passed += 1
        else:
            failed += 1
            print("FAIL self-test %s: %r gives %d upward imports, not %d" % (rel, text, got, want))
    bad = []
    count = 0
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if f.endswith(".rs"):
                count += 1
                path = os.path.join(d, f)
                rel = os.path.relpath(path, src)
                for target, n in upward(src, rel, open(path).read()):
                    bad.append("%s:%d imports %s" % (rel, n, target))
    if bad or count < 100:
        failed += 1
        print("FAIL imports go up a layer (%d sources):" % count)
        for b in bad:
            print("    " + b)
    else:
        passed += 1
        print("PASS no import goes up a layer (%d sources)" % count)
    print("layers: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


sys.exit(main())
