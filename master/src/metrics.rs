//! The master's metrics (Prometheus text format, served at `/metrics`) and the one way
//! to report a refused input: [`refuse`], which counts it and logs it at most once per
//! source and reason per [`REFUSAL_LOG_INTERVAL`].
//!
//! One process-wide [`Metrics`] ([`metrics()`]); every counter is a lock-free atomic, so
//! any task or thread may bump one. Add a metric here, beside its siblings, with a doc
//! comment saying what it counts; [`encode`] writes them all.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `halite_refused_total` | counter | `port` (request, publish, cluster, admin, disk, health), `reason` |
//! | `halite_request_waiting` | gauge | `class` (sign_in, return, other): requests received on the request port and waiting to start |
//! | `halite_request_in_flight` | gauge | `class`: requests being handled |
//! | `halite_request_started_total` | counter | `class`: requests started (handed to a handler) |
//! | `halite_signin_reused_total` | counter | `how` (joined, cached): sign-ins answered with the answer of an identical one, no RSA spent |
//! | `halite_rsa_private_operations_total` | counter | `op` (decrypt, sign, x931_sign): RSA private-key operations of this process |
//! | `halite_rsa_private_cpu_seconds_total` | counter | `op`: CPU-seconds the threads spent in those operations (the floor of a sign-in storm's CPU) |
//!
//! The cluster and traffic metrics (indexes, lag, leader, proposals, returns, sign-ins,
//! view errors, connected minions) are in `daemon/readiness/node_metrics.rs`.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// How often the same refusal (source, reason) is logged at most.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Most distinct (source, reason) pairs remembered for log rate limiting; past it the
/// memory is cleared (a flood of sources then logs again at most once per source).
const MAX_REMEMBERED: usize = 10_000;

/// Where a refused input arrived.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Port {
    /// The request server (`ret_port`).
    Request,
    /// The publisher (`publish_port`).
    Publish,
    /// The cluster transport (`cluster_peers`).
    Cluster,
    /// The admin socket.
    Admin,
    /// Bytes read from disk.
    Disk,
    /// The HTTP health endpoint (`halite_health_port`).
    Health,
    /// salt-api (`rest_cherrypy:port`, its own process).
    Api,
}

impl Port {
    pub fn as_str(self) -> &'static str {
        match self {
            Port::Request => "request",
            Port::Publish => "publish",
            Port::Cluster => "cluster",
            Port::Admin => "admin",
            Port::Disk => "disk",
            Port::Health => "health",
            Port::Api => "api",
        }
    }
}

/// A label set of one short fixed word (`class`, `how`, `op`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HowLabel {
    pub how: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub port: String,
    pub reason: String,
}

/// Every metric the master exports.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Inputs refused, by port and reason (a short fixed word, never peer bytes).
    pub refused: Family<RefusedLabels, Counter>,
    /// Requests waiting to start on the request port, by class (`request_port::shares`).
    pub request_waiting: Family<ClassLabel, Gauge>,
    /// Requests being handled on the request port, by class.
    pub request_in_flight: Family<ClassLabel, Gauge>,
    /// Requests started on the request port, by class.
    pub request_started: Family<ClassLabel, Counter>,
    /// Sign-ins answered with an identical sign-in's answer (`request_port::signins`).
    pub signin_reused: Family<HowLabel, Counter>,
    /// RSA private-key operations (`wire::crypto::PrivateKey`).
    pub rsa_private: Family<OpLabel, Counter>,
    /// CPU-seconds spent in them, by the thread that ran each one.
    pub rsa_private_cpu: Family<OpLabel, Counter<f64, AtomicU64>>,
    /// When each (source, reason) was last logged.
    logged: Mutex<HashMap<(Port, String, &'static str), Instant>>,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("halite");
        let refused = Family::<RefusedLabels, Counter>::default();
        registry.register("refused", "Inputs refused, by port and reason", refused.clone());
        let (request_waiting, request_in_flight, request_started) = (Family::default(), Family::default(), Family::default());
        registry.register("request_waiting", "Requests received on the request port and waiting to start, by class", Family::<ClassLabel, Gauge>::clone(&request_waiting));
        registry.register("request_in_flight", "Requests being handled on the request port, by class", Family::<ClassLabel, Gauge>::clone(&request_in_flight));
        registry.register("request_started", "Requests started on the request port, by class", Family::<ClassLabel, Counter>::clone(&request_started));
        let signin_reused = Family::<HowLabel, Counter>::default();
        registry.register("signin_reused", "Sign-ins answered with the answer of an identical sign-in, without RSA", signin_reused.clone());
        let rsa_private = Family::<OpLabel, Counter>::default();
        registry.register("rsa_private_operations", "RSA private-key operations of this process, by operation", rsa_private.clone());
        let rsa_private_cpu = Family::<OpLabel, Counter<f64, AtomicU64>>::default();
        registry.register("rsa_private_cpu_seconds", "CPU-seconds spent in RSA private-key operations, by operation", rsa_private_cpu.clone());
        Metrics { registry: Mutex::new(registry), refused, request_waiting, request_in_flight, request_started, signin_reused, rsa_private, rsa_private_cpu, logged: Mutex::new(HashMap::new()) }
    }

    /// Registers one more metric (e.g. at start-up, gauges the daemon keeps current).
    pub fn register(&self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        self.registry.lock().unwrap_or_else(|p| p.into_inner()).register(name, help, metric);
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// Runs an RSA private-key operation `f`, counted, and adds the CPU time its thread
/// spent in it (two `clock_gettime` calls, under a microsecond beside the operation's
/// hundreds).
pub fn rsa_private<T>(op: &'static str, f: impl FnOnce() -> T) -> T {
    let t0 = thread_cpu_seconds();
    let out = f();
    let spent = thread_cpu_seconds() - t0;
    let label = OpLabel { op };
    let m = metrics();
    m.rsa_private.get_or_create(&label).inc();
    m.rsa_private_cpu.get_or_create(&label).inc_by(spent.max(0.0));
    out
}

/// The calling thread's CPU time (user and system), in seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Every metric in Prometheus' text exposition format.
pub fn encode() -> String {
    let mut out = String::new();
    let registry = metrics().registry.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!("cannot encode the metrics: {e}");
    }
    out
}

/// Reports a refused input: counts it under (`port`, `reason`) and logs it with `detail`
/// unless the same `source` was logged for the same reason less than
/// [`REFUSAL_LOG_INTERVAL`] ago. `reason` is a short fixed word (a metric label);
/// `source` is who sent it (an address, a minion id), `detail` the particulars.
pub fn refuse(port: Port, source: &str, reason: &'static str, detail: &dyn std::fmt::Display) {
    refuse_at(port, source, reason, detail, true)
}

/// Set once this process first reported ready (`daemon::probes`).
static SETTLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks the end of start-up: from now on every cluster-port refusal is a warning.
pub fn settled() {
    SETTLED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// A cluster-port refusal (the transport's hook). Until the member first reports ready,
/// the refusals a start of the cluster produces by itself are counted as always but
/// logged at info, not as warnings: `wrong_peer` (a peer dialled under the id it had
/// before it took its own, a founder's provisional id) and `not_a_member` (frames from a
/// member that arrive before this member's node has handed its key book over).
pub fn refuse_cluster(source: &str, reason: &'static str, detail: &dyn std::fmt::Display) {
    let transient = matches!(reason, "wrong_peer" | "not_a_member") && !SETTLED.load(std::sync::atomic::Ordering::Relaxed);
    refuse_at(Port::Cluster, source, reason, detail, !transient)
}

fn refuse_at(port: Port, source: &str, reason: &'static str, detail: &dyn std::fmt::Display, warn: bool) {
    let m = metrics();
    m.refused.get_or_create(&RefusedLabels { port: port.as_str().to_string(), reason: reason.to_string() }).inc();
    let now = Instant::now();
    let log = {
        let mut seen = m.logged.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_REMEMBERED {
            seen.clear();
        }
        let key = (port, source.chars().take(128).collect::<String>(), reason);
        match seen.get(&key) {
            Some(t) if now.duration_since(*t) < REFUSAL_LOG_INTERVAL => false,
            _ => {
                seen.insert(key, now);
                true
            }
        }
    };
    if log && warn {
        tracing::warn!(port = port.as_str(), source = %source.escape_debug(), reason, "refused: {detail} (logged at most once a minute per source)");
    } else if log {
        tracing::info!(port = port.as_str(), source = %source.escape_debug(), reason, "refused while starting: {detail} (logged at most once a minute per source)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_every_time() {
        let before = metrics().refused.get_or_create(&RefusedLabels { port: "admin".into(), reason: "test_only".into() }).get();
        for _ in 0..5 {
            refuse(Port::Admin, "unit-test", "test_only", &"a test refusal");
        }
        let after = metrics().refused.get_or_create(&RefusedLabels { port: "admin".into(), reason: "test_only".into() }).get();
        assert_eq!(after - before, 5);
        let text = encode();
        assert!(text.contains("halite_refused_total{port=\"admin\",reason=\"test_only\"}"), "{text}");
    }

    #[test]
    fn start_up_refusals_on_the_cluster_port_are_counted_too() {
        let count = || metrics().refused.get_or_create(&RefusedLabels { port: "cluster".into(), reason: "wrong_peer".into() }).get();
        let before = count();
        // Before and after the member first reports ready: logged at info, then as a
        // warning, counted every time.
        refuse_cluster("127.0.0.1:1", "wrong_peer", &"expected member 1, the peer says it is 2");
        settled();
        refuse_cluster("127.0.0.1:1", "wrong_peer", &"expected member 1, the peer says it is 2");
        assert_eq!(count() - before, 2);
    }
}
