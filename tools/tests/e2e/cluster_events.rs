//! Events across a three-member cluster: what a real salt-minion 3008.5 fires through one
//! member (a custom event, its job return) is seen by `salt-run state.event` on another,
//! with Salt's `__peer_id` naming the member it was fired on; a tag reserved for the
//! members (`cluster/*`) that a minion fires is seen nowhere.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::cluster::founding;
use crate::support::*;

#[test]
fn an_event_fired_through_one_member_is_seen_on_another_with_its_peer_id() {
    let c = founding(3, "halite-events", "auto_accept: True\n");
    let (a, b) = (&c.envs[0], &c.envs[1]);
    let _m1 = start_minion(&a.root, "m1", &format!("master: {}\nmaster_port: {}\n", a.ip, a.ret));
    wait_minion_ready(&a.root, "m1", 1, 90);
    wait_ping(a, "m1", 90);
    let (_watcher, mut lines) = Proc::spawn_lines("salt-run state.event on the second member", Command::new(SALT_RUN).args(["-c", &b.conf(), "state.event", "tagmatch=*"]), &b.root.join("state-event.log"));
    let tagged = |lines: &[String], tag: &str| lines.iter().any(|l| l.starts_with(&format!("{tag}\t")));
    let returned = |lines: &[String]| lines.iter().any(|l| l.starts_with("salt/job/") && l.contains("/ret/m1\t"));
    // The watcher says nothing when it has subscribed: the events are sent again until it
    // has seen a round of them. Each round fires the reserved tag first.
    let mut seen = false;
    for _ in 0..10 {
        assert_eq!(a.salt_json(&["m1", "event.send", "cluster/event/10.9.9.9/salt/key", "{\"act\": \"accept\"}"], 20), json!({"m1": true}));
        assert_eq!(a.salt_json(&["m1", "event.send", "my/custom/tag", "{\"x\": 1}"], 20), json!({"m1": true}));
        if lines.poll(Duration::from_secs(3), |l| tagged(l, "my/custom/tag") && returned(l)) {
            seen = true;
            break;
        }
    }
    let all = lines.seen().to_vec();
    assert!(seen, "events seen on the second member:\n{}", all.join("\n"));
    let custom = all.iter().find(|l| l.starts_with("my/custom/tag\t")).expect("the custom event");
    let data = json(custom.split_once('\t').expect("tab").1);
    assert_eq!((data["__peer_id"].as_str(), &data["data"]["x"]), (Some(a.ip.as_str()), &json!(1)), "{data}");
    let ret = all.iter().find(|l| l.starts_with("salt/job/") && l.contains("/ret/m1\t")).expect("the return event");
    assert_eq!(json(ret.split_once('\t').expect("tab").1)["__peer_id"].as_str(), Some(a.ip.as_str()), "{ret}");
    assert!(!all.iter().any(|l| l.starts_with("cluster/")), "a minion's reserved tag reached the bus:\n{}", all.join("\n"));
}
