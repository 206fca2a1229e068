//! The Salt mine with unmodified salt-minion 3008.5 processes: `mine_functions` sent by
//! `mine.update` (from `salt` and from `salt-run mine.update`), read by a minion
//! (`salt m1 mine.get`) and by the operator (`salt-run mine.get`), `mine.delete` and `mine.flush`, the master's `mine_get` ACL, and
//! on a three-member cluster mine data sent through one member read through another.

use serde_json::{json, Value};

use crate::cluster::founding;
use crate::support::*;

/// What every test minion offers its mine: `test.ping` and an echo of its own name.
///
/// `mine_enabled: False` leaves out salt-minion's scheduled `mine.update` (run once at
/// start, then every `mine_interval`): the tests send every update themselves, and the
/// scheduled one, late on a loaded machine, could land after a test's `mine.flush`.
fn mine_conf(env_ip: &str, ret: u16, id: &str) -> String {
    format!("master: {env_ip}\nmaster_port: {ret}\nmine_enabled: False\nmine_functions:\n  test.ping: []\n  test.echo:\n    - from-{id}\n")
}

/// `salt-run mine.get ARGS... --out json` through `env`'s master.
fn run_mine(env: &Env, args: &[&str]) -> Value {
    let mut full = vec!["mine.get"];
    full.extend_from_slice(args);
    env.runner(&full)
}

/// `salt ID mine.get ARGS...`: what the minion `id` reads from the mine (its return).
fn minion_mine(env: &Env, id: &str, args: &[&str]) -> Value {
    let mut full = vec![id, "mine.get"];
    full.extend_from_slice(args);
    env.salt_json(&full, 30)[id].clone()
}

/// A master with `conf`, and minions m1 and m2 answering pings with their mines sent.
fn master_with_two_mines(conf: &str) -> (Running, [Proc; 2]) {
    let m = Running::start(Env::master(&one_ip(), "localfs_key", conf));
    let env = &m.env;
    let m1 = start_minion(&env.root, "m1", &mine_conf(&env.ip, env.ret, "m1"));
    let m2 = start_minion(&env.root, "m2", &mine_conf(&env.ip, env.ret, "m2"));
    wait_ping(env, "m1", 90);
    wait_ping(env, "m2", 90);
    assert_eq!(env.salt_json(&["*", "mine.update"], 30), json!({"m1": true, "m2": true}));
    (m, [m1, m2])
}

#[test]
fn minions_read_each_others_mine_and_the_operator_reads_it_too() {
    let (m, _minions) = master_with_two_mines("auto_accept: True\n");
    let env = &m.env;

    let both = json!({"m1": true, "m2": true});
    assert_eq!(minion_mine(env, "m1", &["*", "test.ping"]), both);
    assert_eq!(minion_mine(env, "m2", &["m1", "test.echo"]), json!({"m1": "from-m1"}));
    // Several functions answer by function; a list target; the runner's shape.
    assert_eq!(minion_mine(env, "m1", &["m1,m2", "test.ping,test.echo", "list"]), json!({"test.ping": both, "test.echo": {"m1": "from-m1", "m2": "from-m2"}}));
    assert_eq!(run_mine(env, &["*", "test.ping"]), both);
    assert_eq!(run_mine(env, &["m2", "test.echo", "glob"]), json!({"m2": "from-m2"}));
    assert_eq!(run_mine(env, &["*", "no.such"]), json!({}));

    // A delete removes one function of the sender's own mine; a flush all of it.
    assert_eq!(env.salt_json(&["m2", "mine.delete", "test.ping"], 30), json!({"m2": true}));
    assert_eq!(run_mine(env, &["*", "test.ping"]), json!({"m1": true}));
    assert_eq!(run_mine(env, &["*", "test.echo"]), json!({"m1": "from-m1", "m2": "from-m2"}));
    assert_eq!(env.salt_json(&["m1", "mine.flush"], 30), json!({"m1": true}));
    assert_eq!(run_mine(env, &["*", "test.echo"]), json!({"m2": "from-m2"}));
    // mine.send stores a function's result under its name (merged into the mine).
    assert_eq!(env.salt_json(&["m1", "mine.send", "test.echo", "sent"], 30), json!({"m1": true}));
    assert_eq!(minion_mine(env, "m2", &["*", "test.echo"]), json!({"m1": "sent", "m2": "from-m2"}));
}

#[test]
fn salt_run_mine_update_refreshes_the_targeted_minions_mines() {
    let (m, _minions) = master_with_two_mines("auto_accept: True\n");
    let env = &m.env;
    assert_eq!(env.salt_json(&["*", "mine.flush"], 30), json!({"m1": true, "m2": true}));
    assert_eq!(run_mine(env, &["*", "test.echo"]), json!({}));
    // The target only: m1 sends its mine_functions again, m2 does not.
    assert_eq!(env.runner(&["mine.update", "m1"]), json!({"m1": true}));
    assert_eq!(run_mine(env, &["*", "test.echo"]), json!({"m1": "from-m1"}));
    assert_eq!(env.runner(&["mine.update", "m1,m2", "tgt_type=list"]), json!({"m1": true, "m2": true}));
    assert_eq!(run_mine(env, &["*", "test.echo"]), json!({"m1": "from-m1", "m2": "from-m2"}));
    // `clear` and `mine_functions` reach the minions' function: m2's mine is replaced by
    // its test.ping alone.
    assert_eq!(env.runner(&["mine.update", "m2", "clear=True", "mine_functions=[test.ping]"]), json!({"m2": true}));
    assert_eq!(run_mine(env, &["*", "test.echo"]), json!({"m1": "from-m1"}));
    assert_eq!(run_mine(env, &["*", "test.ping"]), json!({"m1": true, "m2": true}));
    assert_eq!(env.runner(&["mine.update", "nosuch*"]), json!({}), "a target matching nobody updates nothing");
}

#[test]
fn the_mine_get_option_limits_what_each_minion_reads() {
    // m1 may read test.* functions; m2 (and the runner, asked as the master's id) nothing.
    let (m, _minions) = master_with_two_mines("auto_accept: True\nmine_get:\n  m1:\n    - 'test\\.p.*'\n");
    let env = &m.env;
    assert_eq!(minion_mine(env, "m1", &["*", "test.ping"]), json!({"m1": true, "m2": true}));
    assert_eq!(minion_mine(env, "m1", &["*", "test.echo"]), json!({}));
    assert_eq!(minion_mine(env, "m2", &["*", "test.ping"]), json!({}));
    assert_eq!(run_mine(env, &["*", "test.ping"]), json!({}));
}

#[test]
fn mine_data_sent_through_one_member_is_read_through_another() {
    let c = founding(3, "halite-mine", "auto_accept: True\n");
    let (a, b) = (&c.envs[0], &c.envs[2]);
    let _m1 = start_minion(&a.root, "m1", &mine_conf(&a.ip, a.ret, "m1"));
    let _m2 = start_minion(&b.root, "m2", &mine_conf(&b.ip, b.ret, "m2"));
    wait_minion_ready(&a.root, "m1", 1, 90);
    wait_minion_ready(&b.root, "m2", 1, 90);
    wait_ping(a, "m1", 90);
    wait_ping(a, "m2", 90);
    // m1 sends through the first member, m2 through the third.
    assert_eq!(a.salt_json(&["*", "mine.update"], 30), json!({"m1": true, "m2": true}));
    let want = json!({"m1": "from-m1", "m2": "from-m2"});
    // The second member handled no mine request: it answers from the log it applied.
    wait_for("the mine on the second member", 30, || run_mine(&c.envs[1], &["*", "test.echo"]) == want);
    for env in &c.envs {
        wait_for("the mine on every member", 30, || run_mine(env, &["*", "test.echo"]) == want);
    }
    // m2, signed in to the third member, reads what m1 sent through the first.
    assert_eq!(minion_mine(&c.envs[1], "m2", &["m1", "test.echo"]), json!({"m1": "from-m1"}));
}
