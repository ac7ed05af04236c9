//! `ferrite-info`: the version and every configuration knob with its default and meaning.

use ferrite::runtime::config::KNOBS;

fn main() {
    println!("Ferrite MPI {}", env!("CARGO_PKG_VERSION"));
    println!("\nConfiguration (environment variables):");
    for k in KNOBS {
        let current = std::env::var(k.name).ok();
        println!("  {:<28} default {:<10} {}", k.name, k.default, k.doc);
        if let Some(v) = current {
            println!("  {:<28} (set here: {v})", "");
        }
    }
}
