//! Readiness: the HTTP endpoint (`/alive`, `/ready`, `/metrics`), its metrics, Salt's probe files.

pub mod health;
pub mod node_metrics;
pub mod probes;
