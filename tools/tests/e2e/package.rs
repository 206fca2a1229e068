//! The Debian package, installed as an operator installs Salt's: built from this build's
//! binaries by `packaging/build-deb.sh`, installed with `dpkg -i`, the master started as
//! its systemd unit starts it (its `ExecStart`, as its `User`), an unmodified
//! salt-minion 3008.5 signs in and answers through `/usr/bin/salt`, then `dpkg --purge`
//! takes the package and its data away. Needs root and dpkg (it installs into the host);
//! without them it prints a `SKIPPED` line, and fails under CI.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// Why this host cannot run the test, if it cannot.
fn cannot_run() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("installing a package needs root".into());
    }
    if !Path::new("/usr/bin/dpkg").exists() || !Path::new("/usr/bin/dpkg-deb").exists() {
        return Some("dpkg is not installed".into());
    }
    if Path::new("/usr/bin/salt-master").exists() && !installed() {
        return Some("/usr/bin/salt-master belongs to another package".into());
    }
    None
}

fn installed() -> bool {
    run(Command::new("dpkg-query").args(["-W", "-f=${Status}", "halite"]), TOOL_TIMEOUT).stdout.starts_with(b"install ok installed")
}

fn purge() {
    run_ok(Command::new("dpkg").args(["--purge", "halite"]), Duration::from_secs(120));
}

/// The test's own config file in `/etc/salt/master.d`.
const TEST_CONF: &str = "/etc/salt/master.d/test.conf";

/// Purges the package when the test ends, passed or not (the test's config file first,
/// so the purge leaves no `/etc/salt`).
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(TEST_CONF);
        if installed() {
            let _ = std::panic::catch_unwind(purge);
        }
    }
}

/// `Key=value` of a systemd unit's `[Service]` section.
fn unit_value(unit: &str, key: &str) -> String {
    unit.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).unwrap_or_else(|| panic!("{key}= not in the unit:\n{unit}")).to_string()
}

#[test]
fn the_debian_package_installs_serves_a_minion_and_purges() {
    if let Some(why) = cannot_run() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "package cannot run under CI: {why}");
        eprintln!("SKIPPED package::the_debian_package_installs_serves_a_minion_and_purges: {why}");
        return;
    }
    if installed() {
        purge();
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/build-deb.sh");
    let bins = Path::new(SALT_KEY).parent().expect("bin dir");
    // Uncompressed: the test build's binaries carry their debug info.
    let deb = run_ok(Command::new(&script).arg(bins).arg(tmp.path()).env("HALITE_DEB_COMPRESS", "none"), Duration::from_secs(600)).trim().to_string();
    let _installed = Installed;
    run_ok(Command::new("dpkg").args(["-i", &deb]), Duration::from_secs(300));
    assert!(installed());

    // What an operator finds: the binaries, Salt's layout, the user, the units.
    for b in ["salt-master", "salt-api", "salt", "salt-key", "salt-run", "halite-ctl"] {
        assert!(Path::new("/usr/bin").join(b).is_file(), "/usr/bin/{b}");
    }
    assert!(Path::new("/etc/salt/master").is_file() && Path::new("/etc/salt/master.d").is_dir());
    assert!(run(Command::new("id").arg("salt"), TOOL_TIMEOUT).status.success(), "the salt user exists");
    let unit = std::fs::read_to_string("/lib/systemd/system/salt-master.service").expect("salt-master.service");
    assert!(Path::new("/lib/systemd/system/salt-api.service").is_file());
    let (user, exec) = (unit_value(&unit, "User"), unit_value(&unit, "ExecStart"));
    assert_eq!(user, "salt");

    // The unit's command as its user, on a loopback address of the test's own with
    // Salt's ports; the log file is the package's.
    let ip = one_ip();
    std::fs::write(TEST_CONF, format!("interface: {ip}\nlog_level: info\n")).expect("master.d/test.conf");
    let log = tmp.path().join("master.out");
    let mut argv = exec.split_whitespace();
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", &user, "--", argv.next().expect("a command")]).args(argv);
    let master = Proc::spawn_logged("the packaged salt-master", &mut cmd, &log);
    wait_for("the packaged master's admin socket", 60, || Path::new("/var/run/salt/master/halite-admin.sock").exists());

    let minion = start_minion(tmp.path(), "pkg-m1", &format!("master: {ip}\n"));
    let salt_key = |args: &[&str]| run(Command::new("/usr/bin/salt-key").args(args), TOOL_TIMEOUT);
    wait_for("pkg-m1's key to be pending", 90, || String::from_utf8_lossy(&salt_key(&["-l", "pre"]).stdout).contains("pkg-m1"));
    assert!(salt_key(&["-a", "pkg-m1", "-y"]).status.success());
    wait_for("pkg-m1 to answer through /usr/bin/salt", 90, || {
        let o = run(Command::new("/usr/bin/salt").args(["pkg-m1", "test.ping", "--out", "json", "-t", "5"]), TOOL_TIMEOUT);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).ok() == Some(serde_json::json!({"pkg-m1": true}))
    });
    // Everything the master keeps is the salt user's.
    let owner = |p: &str| std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(p).unwrap_or_else(|e| panic!("{p}: {e}")));
    let salt_uid = owner("/etc/salt/pki/master");
    assert_ne!(salt_uid, 0);
    for p in ["/etc/salt/pki/master/master.pem", "/var/lib/salt/halite", "/var/cache/salt/master", "/var/log/salt/master"] {
        assert_eq!(owner(p), salt_uid, "{p} is the salt user's");
    }
    drop(minion);
    drop(master);

    std::fs::remove_file(TEST_CONF).expect("the test's own master.d file");
    purge();
    assert!(!installed());
    for p in ["/usr/bin/salt-master", "/etc/salt", "/var/lib/salt/halite", "/var/cache/salt", "/lib/systemd/system/salt-master.service"] {
        assert!(!Path::new(p).exists(), "{p} is gone after the purge");
    }
}
