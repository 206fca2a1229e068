//! `halite-swarm` against a cluster: its simulated minions keep answering jobs published
//! through every member after the member they are connected to restarted (their broken
//! return socket is replaced; before, every return after the restart was lost and `salt`
//! said "Minion did not return").

use std::process::Command;

use serde_json::json;

use crate::cluster::three;
use crate::support::*;

#[test]
fn swarm_minions_keep_returning_after_their_member_restarts() {
    let mut c = three();
    let on = &c.envs[1];
    let mut cmd = Command::new(SWARM);
    cmd.args(["--master", &on.ip, "--port", &on.ret.to_string(), "--count", "2", "--acceptance-wait", "1"]).arg("--key-dir").arg(c.envs[0].root.join("keys"));
    let (_swarm, mut lines) = Proc::spawn_lines("halite-swarm", &mut cmd, &c.envs[0].root.join("swarm.log"));
    wait_for("the swarm's keys pending", 60, || c.envs[2].ids("minions_pre") == ["swarm-0", "swarm-1"]);
    c.envs[2].ok(SALT_KEY, &["-A", "-y"]);
    lines.wait("the swarm to sign in", 60, |l| l.iter().any(|l| l.contains("\"ready\"")));
    assert_eq!(c.envs[0].salt_json(&["*", "test.echo", "before"], 20), json!({"swarm-0": "before", "swarm-1": "before"}));
    c.restart(1);
    // The subscription reconnects by itself; the first publish after it may be missed
    // while it does, so wait for one answer, then every member's job must be answered.
    wait_for("the swarm answering again", 60, || c.envs[0].salt_json(&["*", "test.ping"], 5) == json!({"swarm-0": true, "swarm-1": true}));
    for (i, env) in c.envs.iter().enumerate() {
        let v = format!("after-{i}");
        assert_eq!(env.salt_json(&["*", "test.echo", &v], 20), json!({"swarm-0": v, "swarm-1": v}), "through member {i}");
    }
}
