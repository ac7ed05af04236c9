//! mpirun / mpiexec for Ferrite: starts N ranks on this host or others and serves them PMI-1.

mod bind;
mod cli;
mod hosts;
mod job;
mod output;
mod sys;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match cli::parse(&args, |v| std::env::var(v).ok()) {
        Ok(cli::Command::Run(mut o)) => {
            let read = |f: &str| std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"));
            let getenv = |v: &str| std::env::var(v).ok();
            if let Err(e) =
                cli::apply_slurm(&mut o, getenv).and_then(|_| cli::resolve_hosts(&mut o, read))
            {
                eprintln!("mpirun: {e}");
                std::process::exit(2);
            }
            for w in &o.warnings {
                eprintln!("mpirun: warning: {w}");
            }
            *o
        }
        Ok(cli::Command::Help) => {
            print!("{}", cli::USAGE);
            return;
        }
        Ok(cli::Command::Version) => {
            println!("mpirun (Ferrite MPI) {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Err(e) => {
            eprintln!("mpirun: {e}");
            std::process::exit(2);
        }
    };
    sys::raise_nofile();
    let code = match job::Job::new(opts) {
        Ok(job) => job.run(),
        Err(e) => {
            eprintln!("mpirun: cannot set up the job: {e}");
            1
        }
    };
    std::process::exit(code);
}
