//! Every admin verb answered from an in-memory state machine and membership.

use std::collections::BTreeMap;

use serde_json::{json, Value as J};

use halite_storage::format::{JobPublished, JobReturn, KeyExpect, KeySet, KeyState, Record, RecordKind, RootsTree};
use halite_storage::keys::BankState;
use halite_storage::import::PkiCounts;
use halite_storage::state::{roots_records, StateMachine, StateRead};

use super::*;
use crate::config::MasterConfig;

const PUB: &str = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----";

pub(super) struct Fixture {
    pub(super) cfg: MasterConfig,
    pub(super) sm: StateMachine,
    members: Members,
    local: BTreeMap<(RootsTree, String), Vec<Record>>,
    /// The `file_roots`/`pillar_roots` on disk, which a lone master's admin verbs read.
    pub(super) disk: crate::view::memory::MemoryRoots,
    pki: (Vec<Record>, PkiCounts),
    index: std::cell::Cell<u64>,
}

impl Fixture {
    pub(super) fn new(name: &str) -> Self {
        Fixture {
            cfg: MasterConfig::under(std::path::Path::new("/nonexistent/halite-admin-test")),
            sm: StateMachine::open_in_memory(name).unwrap(),
            members: Members { term: 1, voters: vec![1], learners: vec![], leader: Some(1), names: [(1, "m1".to_string())].into(), ..Default::default() },
            local: BTreeMap::new(),
            disk: Default::default(),
            pki: (vec![], PkiCounts::default()),
            index: std::cell::Cell::new(0),
        }
    }

    /// A member of a cluster on isolated filesystems (its admin verbs read the log's
    /// roots records).
    pub(super) fn isolated(name: &str) -> Self {
        let mut f = Fixture::new(name);
        f.cfg.cluster_id = Some("c".into());
        f.cfg.cluster_isolated_filesystem = true;
        f
    }

    /// Applies records as the node would once they are committed.
    pub(super) fn apply(&self, recs: &[Record]) {
        let entries: Vec<(u64, Record)> = recs
            .iter()
            .map(|r| {
                self.index.set(self.index.get() + 1);
                (self.index.get(), r.clone())
            })
            .collect();
        self.sm.apply(&entries).unwrap();
    }

    pub(super) fn key(&self, id: &str, state: KeyState, pub_key: &str) {
        self.apply(&[Record::KeySet(KeySet { id: id.into(), state, pub_key: pub_key.as_bytes().to_vec(), time_ns: 1, expect: None, pending_below: None })]);
    }

    pub(super) fn run(&self, req: J) -> Result<Plan> {
        Command::parse(&req)?.answer(self)
    }

    pub(super) fn now(&self, req: J) -> J {
        match self.run(req).unwrap().answer {
            Answer::Now(v) => v,
            Answer::After(f) => f(self).unwrap().value,
        }
    }

    /// Commits a plan's proposals as the daemon would, then reads its answer.
    pub(super) fn carry_out(&self, plan: Plan) -> Settled {
        for g in &plan.proposals {
            self.apply(g);
        }
        match plan.answer {
            Answer::Now(v) => Settled { value: v, events: plan.events, effects: plan.effects },
            Answer::After(f) => f(self).unwrap(),
        }
    }
}

impl AdminView for Fixture {
    fn config(&self) -> &MasterConfig {
        &self.cfg
    }
    fn state(&self) -> &dyn StateRead {
        &self.sm
    }
    fn members(&self) -> Result<Members> {
        Ok(self.members.clone())
    }
    fn new_jid(&self) -> String {
        "20261123000000000042".into()
    }
    fn now_ns(&self) -> u64 {
        7
    }
    /// As the daemon's view chooses (`MasterConfig::roots_from_log`).
    fn roots(&self) -> &dyn crate::view::RootsSource {
        if self.cfg.roots_from_log() {
            &self.sm
        } else {
            &self.disk
        }
    }
    fn local_roots(&self, tree: RootsTree, saltenv: &str) -> Result<Vec<Record>> {
        Ok(self.local.get(&(tree, saltenv.to_string())).cloned().unwrap_or_default())
    }
    fn localfs_pki(&self) -> Result<(Vec<Record>, PkiCounts)> {
        Ok(self.pki.clone())
    }
}

fn all(plan: &Plan) -> Vec<Record> {
    plan.proposals.iter().flatten().cloned().collect()
}

#[test]
fn key_listing_and_selection_follow_salt_key() {
    let f = Fixture::new("keys-list");
    f.key("web01", KeyState::Pending, PUB);
    f.key("web02", KeyState::Accepted, PUB);
    f.key("db01", KeyState::Rejected, PUB);
    f.key("web03", KeyState::Denied, PUB);
    let l = f.now(json!({"cmd": "key.list"}));
    assert_eq!(l["listing"], json!({"minions_pre": ["web01"], "minions_rejected": ["db01"], "minions": ["web02"], "minions_denied": ["web03"]}));
    let sel = |action: &str, m: &str, acc: bool, rej: bool, den: bool| {
        f.now(json!({"cmd": "key.select", "action": action, "match": m, "include_accepted": acc, "include_rejected": rej, "include_denied": den}))["selected"].clone()
    };
    assert_eq!(sel("accept", "*", false, false, false), json!({"minions_pre": ["web01"]}), "accept takes pending keys");
    assert_eq!(sel("accept", "*", false, true, false), json!({"minions_pre": ["web01"], "minions_rejected": ["db01"]}));
    assert_eq!(sel("reject", "web*", true, false, false), json!({"minions_pre": ["web01"], "minions": ["web02"]}));
    assert_eq!(sel("delete", "web0[13]", false, false, false), json!({"minions_pre": ["web01"], "minions_denied": ["web03"]}), "delete takes any bucket");
}

/// A verb is answered over the view's `&dyn StateRead` alone: what it would change is
/// the plan's records, and the applied state is as it was until they are committed.
#[test]
fn a_verb_answers_over_the_query_trait_and_changes_nothing() {
    let f = Fixture::new("state-read");
    f.key("web01", KeyState::Pending, PUB);
    let state: &dyn StateRead = f.state();
    let before = (state.applied_index().unwrap(), state.digest().unwrap());
    let plan = f.run(json!({"cmd": "key.apply", "action": "accept", "selected": {"minions_pre": ["web01"]}})).unwrap();
    assert!(matches!(&all(&plan)[..], [Record::KeySet(k)] if k.id == "web01" && k.state == KeyState::Accepted));
    assert_eq!((state.applied_index().unwrap(), state.digest().unwrap()), before, "answering wrote nothing");
    assert_eq!(state.get_key("web01").unwrap().map(|k| k.state), Some(BankState::Pending));
    assert_eq!(f.carry_out(plan).value, json!({"done": ["web01"], "invalid": []}));
    assert_eq!(state.get_key("web01").unwrap().map(|k| k.state), Some(BankState::Accepted), "committed, the change reads back");
}

#[test]
fn accepting_commits_key_records_and_fires_salt_key() {
    let f = Fixture::new("keys-accept");
    f.key("web01", KeyState::Pending, PUB);
    f.key("bogus", KeyState::Pending, "not a key");
    let plan = f.run(json!({"cmd": "key.apply", "action": "accept", "selected": {"minions_pre": ["web01", "bogus"]}})).unwrap();
    let recs = all(&plan);
    assert!(matches!(&recs[..], [Record::KeySet(k)] if k.id == "web01" && k.state == KeyState::Accepted && k.pub_key == PUB.as_bytes()
        && k.expect == Some(KeyExpect::Holds { state: KeyState::Pending, pub_key: PUB.as_bytes().to_vec() })));
    let s = f.carry_out(plan);
    assert_eq!(s.events.len(), 1);
    assert_eq!(*s.events[0].data(), json!({"result": true, "act": "accept", "id": "web01"}));
    assert!(s.effects.is_empty(), "an accept rotates nothing");
    assert_eq!(s.value, json!({"done": ["web01"], "invalid": ["bogus"]}));
}

/// salt-key on a member whose listing is out of date: the records name what it listed,
/// the log holds something else by the time they apply, so nothing changes and nothing
/// is reported done, fired or rotated.
#[test]
fn key_changes_from_an_out_of_date_listing_do_nothing_and_say_so() {
    let f = Fixture::new("keys-stale");
    f.key("web01", KeyState::Pending, PUB);
    f.key("web02", KeyState::Accepted, PUB);
    let accept = f.run(json!({"cmd": "key.apply", "action": "accept", "selected": {"minions_pre": ["web01"]}})).unwrap();
    let delete = f.run(json!({"cmd": "key.apply", "action": "delete", "selected": {"minions": ["web02"]}})).unwrap();
    // Meanwhile, through another member: web01 rejected, web02 deleted and signed in
    // again with another key (pending).
    f.key("web01", KeyState::Rejected, PUB);
    f.key("web02", KeyState::Deleted, "");
    f.key("web02", KeyState::Pending, "-----BEGIN PUBLIC KEY-----\nOTHER\n-----END PUBLIC KEY-----");
    let s = f.carry_out(accept);
    assert_eq!((s.value, s.events.len()), (json!({"done": [], "invalid": []}), 0));
    let s = f.carry_out(delete);
    assert_eq!((s.value, s.events.len(), s.effects.len()), (json!({"done": [], "invalid": []}), 0, 0));
    assert_eq!(f.sm.get_key("web01").unwrap().unwrap().state, BankState::Rejected);
    assert_eq!(f.sm.get_key("web02").unwrap().unwrap().state, BankState::Pending, "the new key was not deleted");
}

#[test]
fn rejecting_or_deleting_uncounts_and_rotates_the_publish_key() {
    let mut f = Fixture::new("keys-reject");
    f.key("web01", KeyState::Accepted, PUB);
    f.key("web02", KeyState::Denied, PUB);
    let plan = f.run(json!({"cmd": "key.apply", "action": "reject", "selected": {"minions": ["web01"]}})).unwrap();
    assert_eq!(f.carry_out(plan).effects, vec![Effect::Uncount(vec!["web01".into()]), Effect::RotateAes]);
    let plan = f.run(json!({"cmd": "key.apply", "action": "delete", "selected": {"minions": ["web01"], "minions_denied": ["web02"]}})).unwrap();
    let states: Vec<KeyState> = all(&plan).iter().map(|r| if let Record::KeySet(k) = r { k.state } else { panic!() }).collect();
    assert_eq!(states, vec![KeyState::Deleted, KeyState::DeniedCleared]);
    assert_eq!(f.carry_out(plan).value, json!({"done": ["web01", "web02"], "invalid": []}));
    f.key("web01", KeyState::Accepted, PUB);
    f.cfg.raw.insert("rotate_aes_key".into(), serde_yaml::Value::Bool(false));
    let plan = f.run(json!({"cmd": "key.apply", "action": "delete", "selected": {"minions": ["web01"]}})).unwrap();
    assert_eq!(f.carry_out(plan).effects, vec![Effect::Uncount(vec!["web01".into()])], "rotate_aes_key: False");
}

#[test]
fn publishing_commits_a_job_for_the_expected_minions() {
    let f = Fixture::new("publish");
    let none = f.run(json!({"cmd": "publish", "fun": "test.ping", "tgt": "*"}));
    assert!(matches!(none, Err(Error::NoMinionsMatched)), "{none:?}");
    f.key("web01", KeyState::Accepted, PUB);
    f.key("db01", KeyState::Pending, PUB);
    let plan = f.run(json!({"cmd": "publish", "fun": "test.arg", "tgt": ["web01", "db01"], "tgt_type": "list", "arg": [1], "kwarg": {"k": "v"}})).unwrap();
    let [Record::JobPublished(j)] = &all(&plan)[..] else { panic!("{plan:?}") };
    assert_eq!((j.jid.as_str(), j.minions.as_slice(), j.time_ns), ("20261123000000000042", &["web01".to_string()][..], 7));
    let load = crate::wire::payload::to_json(&crate::wire::payload::decode(&j.load).unwrap());
    assert_eq!(load["arg"], json!([1, {"k": "v", "__kwarg__": true}]));
    assert_eq!((load["fun"].as_str(), load["user"].as_str()), (Some("test.arg"), Some("root")));
    assert_eq!(plan.events[0].tag, "salt/job/20261123000000000042/new");
    let Answer::Now(a) = plan.answer else { panic!() };
    assert_eq!(a, json!({"jid": "20261123000000000042", "minions": ["web01"], "missing": ["db01"], "unresolved": false}));
}

#[test]
fn a_batch_runs_next_group_joins_the_runs_job() {
    let f = Fixture::new("publish-join");
    for id in ["m1", "m2"] {
        f.key(id, KeyState::Accepted, PUB);
    }
    let first = f.run(json!({"cmd": "publish", "fun": "test.ping", "tgt": ["m1"], "tgt_type": "list"})).unwrap();
    let [Record::JobPublished(j1)] = &all(&first)[..] else { panic!("{first:?}") };
    let (jid, joins) = (j1.jid.clone(), j1.joins);
    assert!(!joins);
    f.carry_out(first);
    let next = f.run(json!({"cmd": "publish", "fun": "test.ping", "tgt": ["m2"], "tgt_type": "list", "jid": jid})).unwrap();
    let [Record::JobPublished(j2)] = &all(&next)[..] else { panic!("{next:?}") };
    assert_eq!((j2.jid.as_str(), j2.joins, j2.minions.as_slice()), (jid.as_str(), true, &["m2".to_string()][..]));
    let Answer::Now(a) = &next.answer else { panic!() };
    assert_eq!((&a["jid"], &a["minions"]), (&json!(jid), &json!(["m2"])), "the group's own minions");
    f.carry_out(next);
    assert_eq!(f.now(json!({"cmd": "job.list"}))["jobs"][&jid]["minions"], json!(["m1", "m2"]));
    // Refused before anything is proposed: no such job, another function, another user.
    for (req, why) in [
        (json!({"cmd": "publish", "fun": "test.ping", "tgt": "m1", "jid": "20200101000000000000"}), "no job"),
        (json!({"cmd": "publish", "fun": "cmd.run", "tgt": "m1", "jid": jid}), "not a run of cmd.run"),
        (json!({"cmd": "publish", "fun": "test.ping", "tgt": "m1", "jid": jid, "user": "fred"}), "by fred"),
    ] {
        let e = f.run(req).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
}

#[test]
fn a_batch_run_starts_with_its_first_minions_and_can_be_stopped() {
    let f = Fixture::new("batch-run");
    for id in ["m1", "m2", "m3"] {
        f.key(id, KeyState::Accepted, PUB);
    }
    let runner = |fun: &str, arg: J, kwarg: J| json!({"cmd": "runner", "fun": fun, "arg": arg, "kwarg": kwarg});
    let plan = f.run(json!({"cmd": "batch.start", "fun": "test.arg", "arg": ["x"], "kwarg": {"k": 1}, "tgt": "m*", "minions": ["m1", "m2", "m3"], "batch": "2", "timeout": 5, "metadata": {"t": 1}})).unwrap();
    assert_eq!(plan.proposals.len(), 1, "the run and its first start are one entry");
    let [Record::BatchRun(step), Record::JobPublished(j)] = &plan.proposals[0][..] else { panic!("{:?}", plan.proposals) };
    assert_eq!((step.expect, step.stop, j.minions.as_slice(), j.joins, j.jid == step.jid), (0, false, &["m1".to_string(), "m2".to_string()][..], false, true));
    let jid = j.jid.clone();
    let load = crate::wire::payload::to_json(&crate::wire::payload::decode(&j.load).unwrap());
    assert_eq!(load, json!({"arg": ["x", {"k": 1, "__kwarg__": true}], "ret": "", "metadata": {"t": 1}, "fun": "test.arg", "tgt": ["m1", "m2"], "tgt_type": "list", "jid": jid, "user": "root"}));
    let settled = f.carry_out(plan);
    assert_eq!(settled.value, json!({"jid": jid, "minions": ["m1", "m2"]}));
    assert_eq!(settled.events.iter().map(|e| e.tag.as_str()).collect::<Vec<_>>(), [format!("salt/batch/{jid}/new"), format!("salt/job/{jid}/new")]);
    let s = f.now(runner("batch.status", json!([jid]), json!({})))["return"].clone();
    assert_eq!((&s["total"], &s["active"], &s["pending"], &s["batch_size"], &s["halted"], &s["tgt"]), (&json!(3), &json!(2), &json!(1), &json!(2), &json!(false), &json!("m*")), "{s}");
    assert_eq!(f.now(runner("batch.list_active", json!([]), json!({})))["return"].as_array().map(Vec::len), Some(1));
    // Stopped with kill: the stop record, and saltutil.kill_job to the running minions.
    let plan = f.run(runner("batch.stop", json!([jid]), json!({"kill": true}))).unwrap();
    let [Record::BatchRun(stop), Record::JobPublished(kill)] = &plan.proposals[0][..] else { panic!("{:?}", plan.proposals) };
    assert!(stop.stop && stop.state.is_empty());
    let kill_load = crate::wire::payload::to_json(&crate::wire::payload::decode(&kill.load).unwrap());
    assert_eq!((&kill_load["fun"], &kill_load["arg"], kill.minions.as_slice()), (&json!("saltutil.kill_job"), &json!([jid]), &["m1".to_string(), "m2".to_string()][..]));
    assert_eq!(f.carry_out(Plan { proposals: vec![vec![Record::BatchRun(stop.clone())]], ..plan }).value, json!({"return": true}));
    let s = f.now(runner("batch.status", json!([jid]), json!({})))["return"].clone();
    assert_eq!((&s["halted"], &s["halted_reason"]), (&json!(true), &json!("stop")), "{s}");
    assert_eq!(f.now(runner("batch.list_active", json!([]), json!({})))["return"], json!([]));
    assert_eq!(f.now(runner("batch.stop", json!([jid]), json!({})))["return"], json!(false), "stopped already");
    assert_eq!(f.now(runner("batch.status", json!(["20200101000000000000"]), json!({})))["return"], J::Null);
}

#[test]
fn job_queries_answer_in_salts_shapes() {
    let f = Fixture::new("jobs");
    let jid = "20261122035119123456";
    let load = crate::wire::payload::encode(&crate::wire::payload::from_json(&json!({"fun": "test.ping", "arg": [], "tgt": "*", "tgt_type": "glob", "user": "root"})));
    f.apply(&[
        Record::JobPublished(JobPublished { jid: jid.into(), load, minions: vec!["m1".into()], time_ns: 1, started_by: None, joins: false }),
        Record::JobReturn(JobReturn { jid: jid.into(), id: "m1".into(), load: crate::wire::payload::encode(&crate::wire::payload::from_json(&json!({"return": true, "retcode": 0}))), time_ns: 2, first_only: false }),
    ]);
    assert_eq!(f.now(json!({"cmd": "job.returns", "jid": jid}))["returns"]["m1"]["return"], true);
    assert_eq!(f.now(json!({"cmd": "job.list"}))["jobs"][jid]["minions"], json!(["m1"]));
    assert_eq!(f.now(json!({"cmd": "runner", "fun": "jobs.lookup_jid", "jid": jid})), json!({"return": {"m1": true}}));
    let listed = f.now(json!({"cmd": "runner", "fun": "jobs.list_jobs"}));
    assert_eq!(listed["return"][jid], json!({"Function": "test.ping", "Arguments": [], "Target": "*", "Target-type": "glob", "User": "root", "StartTime": "2026, Nov 22 03:51:19.123456"}));
    assert!(f.run(json!({"cmd": "runner", "fun": "jobs.lookup_jid"})).is_err(), "a jid is required");
    // As salt-api's runner client passes it: an argument or a keyword argument.
    assert_eq!(f.now(json!({"cmd": "runner", "fun": "jobs.lookup_jid", "arg": [], "kwarg": {"jid": jid}})), json!({"return": {"m1": true}}));
    assert_eq!(f.now(json!({"cmd": "runner", "fun": "jobs.lookup_jid", "arg": [jid], "kwarg": {}})), json!({"return": {"m1": true}}));
    // A state run's returns name the highstate outputter: it travels with the data.
    let state = "20261122035119123457";
    f.apply(&[Record::JobReturn(JobReturn { jid: state.into(), id: "m1".into(), load: crate::wire::payload::encode(&crate::wire::payload::from_json(&json!({"return": {"s": {"result": true}}, "out": "highstate"}))), time_ns: 3, first_only: false })]);
    assert_eq!(f.now(json!({"cmd": "runner", "fun": "jobs.lookup_jid", "jid": state})), json!({"return": {"outputter": "highstate", "data": {"m1": {"s": {"result": true}}}}}));
}

#[test]
fn cluster_runners_report_the_group() {
    let mut f = Fixture::new("cluster");
    assert_eq!(f.now(json!({"cmd": "runner", "fun": "cluster.ring_info"}))["return"]["is_clustered"], false);
    assert!(f.run(json!({"cmd": "runner", "fun": "cluster.remove_member", "name": "m1"})).unwrap_err().to_string().contains("not a cluster member"));
    f.cfg.cluster_id = Some("c".into());
    let ids: Vec<u64> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"].iter().map(|n| crate::start::member_id(n)).collect();
    f.members = Members { term: 4, voters: ids.clone(), learners: vec![], leader: Some(ids[1]), names: ids.iter().zip(["10.0.0.1", "10.0.0.2", "10.0.0.3"]).map(|(i, n)| (*i, n.to_string())).collect(), ..Default::default() };
    let m = f.now(json!({"cmd": "runner", "fun": "cluster.members"}))["return"].clone();
    assert_eq!((m["voters"].clone(), m["leader_id"].clone(), m["term"].clone()), (json!(["10.0.0.1", "10.0.0.2", "10.0.0.3"]), json!("10.0.0.2"), json!(4)));
    assert_eq!(m["progress"], json!({}));
    // On the leader: its own applied index, each peer's matched index and lag.
    f.members.progress = [
        (ids[1], crate::admin::MemberProgress { applied: Some(90), matched: None, lag: Some(0), ready: Some(true) }),
        (ids[2], crate::admin::MemberProgress { applied: None, matched: Some(40), lag: Some(50), ready: None }),
    ]
    .into();
    let m = f.now(json!({"cmd": "runner", "fun": "cluster.members"}))["return"].clone();
    assert_eq!(m["progress"]["10.0.0.2"], json!({"applied_index": 90, "matched_index": null, "lag": 0, "ready": true}));
    assert_eq!(m["progress"]["10.0.0.3"], json!({"applied_index": null, "matched_index": 40, "lag": 50, "ready": null}));
    // Each member's recorded build, and the cluster's record set: the members' lowest,
    // one that recorded none (10.0.0.3) counting as 1.
    assert_eq!((m["releases"].clone(), m["record_set"].clone()), (json!({}), json!(1)));
    let build = |n: u32| halite_storage::state::RecordedRelease { record_set: n, release: format!("halite {n}") };
    f.members.releases = [(ids[0], build(2)), (ids[1], build(2))].into();
    let m = f.now(json!({"cmd": "runner", "fun": "cluster.members"}))["return"].clone();
    assert_eq!(m["releases"]["10.0.0.1"], json!({"release": "halite 2", "record_set": 2}));
    assert_eq!(m["record_set"], json!(1));
    f.members.releases.insert(ids[2], build(3));
    assert_eq!(f.now(json!({"cmd": "runner", "fun": "cluster.members"}))["return"]["record_set"], json!(2));
    let ring = f.now(json!({"cmd": "runner", "fun": "cluster.ring_info"}))["return"].clone();
    assert_eq!((ring["node_count"].clone(), ring["vnodes"].clone()), (json!(3), json!(150)));
    assert!(f.run(json!({"cmd": "runner", "fun": "cluster.remove_member", "name": "10.9.9.9"})).unwrap_err().to_string().contains("is not a member"));
    let plan = f.run(json!({"cmd": "runner", "fun": "cluster.remove_member", "name": "10.0.0.3"})).unwrap();
    assert_eq!(plan.membership, Some(MemberChange::Remove(ids[2])));
    // The answer is read after the change is committed.
    f.members.voters.pop();
    let Answer::After(after) = plan.answer else { panic!("answered before the change") };
    assert_eq!(after(&f).unwrap().value["return"], json!({"removed": "10.0.0.3", "voters": ["10.0.0.1", "10.0.0.2"], "learners": []}));
}

#[test]
fn sync_roots_proposes_what_differs_from_the_applied_roots() {
    let mut f = Fixture::new("sync");
    f.cfg.cluster_id = Some("c".into());
    f.apply(&roots_records(RootsTree::File, "base", "same.sls", 0o644, b"same"));
    f.apply(&roots_records(RootsTree::File, "base", "gone.sls", 0o644, b"gone"));
    f.apply(&roots_records(RootsTree::File, "base", "changed.sls", 0o644, b"old"));
    let mut local = roots_records(RootsTree::File, "base", "same.sls", 0o644, b"same");
    local.extend(roots_records(RootsTree::File, "base", "changed.sls", 0o644, b"new"));
    local.extend(roots_records(RootsTree::File, "base", "new.sls", 0o600, b"new"));
    f.local.insert((RootsTree::File, "base".into()), local);
    let plan = f.run(json!({"cmd": "runner", "fun": "cluster.sync_roots", "roots": "file"})).unwrap();
    // Staged content of what differs, then the commit (alone, last) naming every file
    // and the removal it expects.
    let recs = all(&plan);
    let staged: Vec<String> = recs.iter().filter_map(|r| if let Record::RootsStage(s) = r { Some(s.blob.path.clone()) } else { None }).collect();
    assert_eq!(staged, ["changed.sls", "new.sls"]);
    assert_eq!(plan.proposals.last().map(Vec::len), Some(1));
    let Some(Record::RootsSync(commit)) = recs.last() else { panic!("no commit last: {recs:?}") };
    let named: Vec<&str> = commit.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(named, ["same.sls", "changed.sls", "new.sls"]);
    assert_eq!(commit.remove.iter().map(|t| t.path.as_str()).collect::<Vec<_>>(), ["gone.sls"]);
    // The answer is read from the applied state: before the records apply, the sync
    // reads as not applied; once they do, the counts.
    let Answer::After(after) = plan.answer else { panic!("answered before the commit") };
    let plan2 = f.run(json!({"cmd": "runner", "fun": "cluster.sync_roots", "roots": "file"})).unwrap();
    let Answer::After(early) = plan2.answer else { panic!() };
    assert!(early(&f).unwrap_err().to_string().contains("did not apply"));
    f.apply(&recs);
    let a = after(&f).unwrap().value;
    assert_eq!((a["return"]["written"].clone(), a["return"]["removed"].clone(), a["return"]["unchanged"].clone()), (json!(2), json!(1), json!(1)));
    assert!(f.run(json!({"cmd": "runner", "fun": "cluster.sync_roots", "roots": "everything"})).is_err());
}

#[test]
fn migration_imports_what_the_state_lacks_between_markers_once() {
    let mut f = Fixture::new("migrate");
    let key = |id: &str, state| Record::KeySet(KeySet { id: id.into(), state, pub_key: PUB.as_bytes().to_vec(), time_ns: 1, expect: None, pending_below: None });
    f.pki = (vec![key("a", KeyState::Accepted), key("b", KeyState::Pending)], PkiCounts { accepted: 1, pending: 1, ..Default::default() });
    let plan = f.run(json!({"cmd": "runner", "fun": "pki.migrate_to_mmap"})).unwrap();
    let kinds: Vec<RecordKind> = all(&plan).iter().map(Record::kind).collect();
    assert_eq!(kinds, vec![RecordKind::ImportMarker, RecordKind::KeySet, RecordKind::KeySet, RecordKind::ImportMarker]);
    assert_eq!(plan.effects, vec![Effect::FinishMmapMigration { build_view: true }]);
    let Answer::Now(a) = &plan.answer else { panic!() };
    assert!(a["return"].as_str().unwrap().starts_with("PKI keys migrated to mmap_key backend successfully.\n  Accepted: 1\n  Pending:  1"));
    f.apply(&all(&plan));
    assert!(f.run(json!({"cmd": "runner", "fun": "pki.migrate_to_mmap"})).unwrap().proposals.is_empty(), "a second run imports nothing");
}

#[test]
fn unknown_requests_are_refused_with_salts_words() {
    let f = Fixture::new("unknown");
    assert_eq!(f.run(json!({"cmd": "runner", "fun": "manage.joined"})).unwrap_err().to_string(), "'manage.joined' is not available.");
    assert!(f.run(json!({"cmd": "nope"})).unwrap_err().to_string().contains("unknown admin command"));
    assert!(f.run(json!({"cmd": "key.apply", "action": "frobnicate", "selected": {}})).unwrap_err().to_string().contains("unknown key action"));
}
