//! `salt-run`: runners. With the master stopped: `pki.status` and
//! `pki.migrate_to_mmap [test=True|dry_run=True]`.

use std::path::PathBuf;

use clap::Parser;

use halite_tools::common::{init_logging, load_config, run, Failure, Result};
use halite_tools::pki;

#[derive(Parser, Debug)]
#[command(name = "salt-run", about = "Run Salt runners (Halite)", version)]
struct Args {
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    #[arg(short = 'l', long = "log-level", default_value = "warning")]
    log_level: String,
    /// Runner function, e.g. pki.migrate_to_mmap.
    fun: String,
    /// Arguments; `key=value` are keyword arguments.
    args: Vec<String>,
}

fn main() {
    let args = Args::parse();
    init_logging(&args.log_level);
    run(|| real_main(args))
}

/// Salt's truthy strings for a keyword like `test=True`.
fn truthy(v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" | "none" => Ok(false),
        other => Err(Failure::new(format!("expected True or False, got {other:?}"), 2)),
    }
}

fn real_main(a: Args) -> Result<()> {
    let cfg = load_config(&a.config_dir)?;
    let mut kwargs = std::collections::BTreeMap::new();
    for x in &a.args {
        match x.split_once('=') {
            Some((k, v)) => {
                kwargs.insert(k.to_string(), v.to_string());
            }
            None => return Err(Failure::new(format!("{}: unexpected positional argument {x:?}", a.fun), 2)),
        }
    }
    let dry = |kw: &std::collections::BTreeMap<String, String>| -> Result<bool> {
        let mut d = false;
        for k in ["test", "dry_run"] {
            if let Some(v) = kw.get(k) {
                d |= truthy(v)?;
            }
        }
        Ok(d)
    };
    let out = match a.fun.as_str() {
        "pki.status" => pki::status(&cfg),
        "pki.migrate_to_mmap" => pki::migrate_offline(&cfg, dry(&kwargs)?)?,
        other => return Err(Failure::new(format!("'{other}' is not available."), 1)),
    };
    println!("{out}");
    Ok(())
}
