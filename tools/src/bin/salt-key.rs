//! `salt-key`: manage minion keys, with Salt's flags and output.
//!
//! Listing (`-L`, `-l`) and fingerprints (`-f`, `-F`) read the configured key view, so
//! they work with the master stopped. Accept, reject and delete are committed through
//! the log: via the running master's admin socket, or, with `--offline`, directly into a
//! stopped master's log (refused while a master holds its data directory:
//! `halite_tools::offline`).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};

use halite_master::admin::client::{request_timeout, AdminClient};

use halite_tools::common::{init_logging, load_config, run, Failure, Result};
use halite_tools::keys::{self, Cmd, Include};
use halite_tools::offline;
use halite_tools::output::{listing_value, Out};
use halite_tools::printer::{OutputFlags, Printer};

/// More time for a `key.apply`, per key it commits.
const APPLY_PER_KEY: Duration = Duration::from_millis(5);

#[derive(Parser, Debug)]
#[command(name = "salt-key", about = "Manage Salt minion keys (Halite)", version)]
struct Args {
    /// The Salt configuration directory.
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    /// List all public keys.
    #[arg(short = 'L', long = "list-all")]
    list_all: bool,
    /// List keys in one state: pre/un/unaccepted, acc/accepted, rej/rejected, den/denied, all.
    #[arg(short = 'l', long = "list", value_name = "ARG")]
    list: Option<String>,
    /// Accept the keys matching the glob (pending; see --include-rejected/--include-denied).
    #[arg(short = 'a', long = "accept", value_name = "GLOB")]
    accept: Option<String>,
    /// Accept all pending keys.
    #[arg(short = 'A', long = "accept-all")]
    accept_all: bool,
    /// Reject the keys matching the glob.
    #[arg(short = 'r', long = "reject", value_name = "GLOB")]
    reject: Option<String>,
    /// Reject all pending keys.
    #[arg(short = 'R', long = "reject-all")]
    reject_all: bool,
    /// Delete the keys matching the glob.
    #[arg(short = 'd', long = "delete", value_name = "GLOB")]
    delete: Option<String>,
    /// Delete all keys.
    #[arg(short = 'D', long = "delete-all")]
    delete_all: bool,
    /// Print the fingerprints of the keys matching the glob.
    #[arg(short = 'f', long = "finger", value_name = "GLOB")]
    finger: Option<String>,
    /// Print all fingerprints.
    #[arg(short = 'F', long = "finger-all")]
    finger_all: bool,
    /// Write the signature of the master's public key (`master_pubkey_signature`), for
    /// `master_use_pubkey_signature`.
    #[arg(long = "gen-signature")]
    gen_signature: bool,
    /// With --gen-signature: the private key to sign with (default pki_dir/master_sign.pem).
    #[arg(long = "priv", value_name = "FILE")]
    priv_key: Option<PathBuf>,
    /// With --gen-signature: the public key to sign (default pki_dir/master.pub).
    #[arg(long = "pub", value_name = "FILE")]
    pub_key: Option<PathBuf>,
    /// With --gen-signature: the folder the signature file goes to (default pki_dir).
    #[arg(long = "signature-path", value_name = "DIR")]
    signature_path: Option<PathBuf>,
    /// With --gen-signature: make a signing key pair when there is none.
    #[arg(long = "auto-create")]
    auto_create: bool,
    /// The size of a key pair --auto-create makes (at least 2048).
    #[arg(long = "keysize", value_name = "BITS")]
    keysize: Option<u32>,
    /// Answer yes to every question.
    #[arg(short = 'y', long = "yes")]
    yes: bool,
    #[arg(long = "include-accepted")]
    include_accepted: bool,
    #[arg(long = "include-rejected")]
    include_rejected: bool,
    #[arg(long = "include-denied")]
    include_denied: bool,
    #[arg(long = "include-all")]
    include_all: bool,
    #[command(flatten)]
    output: OutputFlags,
    /// Change the keys of a stopped master directly in its log (refused while a master
    /// runs or starts on the data directory).
    #[arg(long = "offline")]
    offline: bool,
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,
    /// Log level for messages on stderr.
    #[arg(long = "log-level", default_value = "warning")]
    log_level: String,
}

fn main() {
    let args = Args::parse();
    init_logging(&args.log_level);
    run(|| real_main(args))
}

fn print(v: &Value, printer: &Printer) {
    printer.print(v, printer.plain_out());
}

fn real_main(args: Args) -> Result<()> {
    let cfg = load_config(&args.config_dir)?;
    let change = [
        (args.accept.clone(), Cmd::Accept),
        (args.accept_all.then(|| "*".to_string()), Cmd::Accept),
        (args.reject.clone(), Cmd::Reject),
        (args.reject_all.then(|| "*".to_string()), Cmd::Reject),
        (args.delete.clone(), Cmd::Delete),
        (args.delete_all.then(|| "*".to_string()), Cmd::Delete),
    ]
    .into_iter()
    .find_map(|(m, c)| m.map(|m| (m, c)));
    let printer = args.output.printer(&cfg, Out::Key, "", false).map_err(|e| Failure::new(e.to_string(), 1))?;
    if args.gen_signature {
        return gen_signature(&args, &cfg, &printer);
    }
    if let Some((pattern, cmd)) = change {
        return change_keys(&args, &cfg, cmd, &pattern, &printer);
    }
    if let Some(g) = args.finger.clone().or(args.finger_all.then(|| "*".to_string())) {
        print(&keys::fingers(&cfg, &g)?, &printer);
        return Ok(());
    }
    let listing = keys::listing(&cfg)?;
    let v = match &args.list {
        Some(arg) => keys::list_status(&listing, arg)?,
        None => listing_value(&listing),
    };
    print(&v, &printer);
    Ok(())
}

/// `--gen-signature`: prints Salt's `{"return": ...}` (True when written, False when the
/// file exists, else the reason).
fn gen_signature(args: &Args, cfg: &halite_master::MasterConfig, printer: &Printer) -> Result<()> {
    use halite_master::keyfiles::gen_signature::{self as gen, GenSignature, Outcome};
    let req = GenSignature { public: args.pub_key.clone(), private: args.priv_key.clone(), signature_path: args.signature_path.clone(), auto_create: args.auto_create, keysize: args.keysize };
    let ret = match gen::gen_signature(cfg, &req).map_err(|e| Failure::new(e.to_string(), 1))? {
        Outcome::Written(_) => json!(true),
        Outcome::Exists(_) => json!(false),
        Outcome::Refused(why) => json!(why),
    };
    // Salt's key outputter does not take this shape and falls back to nested.
    printer.print(&json!({ "return": ret }), if printer.forced() { printer.plain_out() } else { Out::Nested });
    Ok(())
}

fn change_keys(args: &Args, cfg: &halite_master::MasterConfig, cmd: Cmd, pattern: &str, printer: &Printer) -> Result<()> {
    let inc = Include {
        accepted: cmd == Cmd::Reject && (args.include_all || args.include_accepted),
        rejected: cmd == Cmd::Accept && (args.include_all || args.include_rejected),
        denied: args.include_denied,
    };
    // Changes go through the running master's admin socket; with `--offline`, through a
    // stopped master's log, under its data directory's lock.
    let mut admin = if args.offline { None } else { AdminClient::connect(&cfg.sock_dir) };
    // A master that does not answer within `request_channel_timeout` is not responding.
    let call_timeout = request_timeout(cfg);
    if let Some(a) = &mut admin {
        a.set_timeout(Some(call_timeout));
    }
    if admin.is_none() && !args.offline {
        return Err(offline::no_master(Some("salt-key --offline changes a stopped master's keys in its log")));
    }
    let held = if args.offline { Some(offline::hold(cfg, "salt-key --offline", Some("without --offline, salt-key changes keys through the running master"))?) } else { None };
    let node = if held.is_some() { Some(keys::open_node(cfg)?) } else { None };
    let selected = match (&mut admin, &node) {
        (Some(a), _) => {
            let v = a.call(&json!({
                "cmd": "key.select", "action": cmd.verb(), "match": pattern,
                "include_accepted": inc.accepted, "include_rejected": inc.rejected, "include_denied": inc.denied,
            }))?;
            v["selected"].as_object().cloned().unwrap_or_default()
        }
        (None, Some(node)) => keys::select(&keys::state_listing(&**node.state())?, cmd, pattern, inc),
        (None, None) => return Err(Failure::new("no master and no log", 1)),
    };
    if selected.is_empty() {
        let mut st = vec!["unaccepted"];
        if inc.accepted {
            st.push("accepted");
        }
        if inc.rejected {
            st.push("rejected");
        }
        if inc.denied {
            st.push("denied");
        }
        let s = if st.len() == 1 { st[0].to_string() } else { format!("{} or {}", st[..st.len() - 1].join(", "), st[st.len() - 1]) };
        println!("The key glob '{pattern}' does not match any {s} keys.");
        return Ok(());
    }
    println!("The following keys are going to be {}ed:", cmd.verb().trim_end_matches('e'));
    print(&Value::Object(selected.clone()), printer);
    if !args.yes {
        let (prompt, default_yes) = if cmd == Cmd::Delete { ("Proceed? [N/y] ", false) } else { ("Proceed? [n/Y] ", true) };
        print!("{prompt}");
        std::io::stdout().flush().map_err(Failure::from)?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map_err(Failure::from)?;
        let ans = line.trim().to_lowercase();
        let yes = if ans.is_empty() { default_yes } else { ans.starts_with('y') };
        if !yes {
            return Ok(());
        }
    }
    let ids = |v: &Value| -> Vec<String> { v.as_array().into_iter().flatten().filter_map(|x| x.as_str().map(String::from)).collect() };
    let (done, invalid): (Vec<String>, Vec<String>) = match (&mut admin, &node) {
        (Some(a), _) => {
            // Committing many keys takes longer than a request: more time per key.
            let n: usize = selected.values().map(|v| v.as_array().map_or(0, Vec::len)).sum();
            let within = call_timeout.saturating_add(APPLY_PER_KEY.saturating_mul(n.min(u32::MAX as usize) as u32));
            let v = a.call_within(&json!({ "cmd": "key.apply", "action": cmd.verb(), "selected": selected }), within)?;
            (ids(&v["done"]), ids(&v["invalid"]))
        }
        (None, Some(node)) => keys::apply(node, cmd, &selected)?,
        (None, None) => (Vec::new(), Vec::new()),
    };
    // The node closes the log and the state machine before the directory is let go.
    drop(node);
    drop(held);
    for id in invalid {
        eprintln!("Unable to {} invalid key for {id}.", cmd.verb());
    }
    for id in done {
        println!("Key for minion {id} {}ed.", cmd.verb().trim_end_matches('e'));
    }
    Ok(())
}
