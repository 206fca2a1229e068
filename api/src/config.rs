//! salt-api's options, read from the master config as rest_cherrypy reads them.
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `rest_cherrypy: port` | (required) | TCP port |
//! | `rest_cherrypy: host` | `0.0.0.0` | address to listen on |
//! | `rest_cherrypy: disable_ssl` | `False` | `True`: plain HTTP |
//! | `rest_cherrypy: ssl_crt`, `ssl_key` | (required unless `disable_ssl`) | PEM certificate chain and private key served over HTTPS ([`super::tls`]) |
//! | `rest_cherrypy: max_request_body_size` | `1048576` | largest request body, bytes (larger: 413) |
//! | `rest_cherrypy: thread_pool` | `100` | connections served at once (more are closed at once, counted) |
//! | `rest_cherrypy: webhook_url` | `/hook` | the path of `POST` hooks ([`crate::hook`]) |
//! | `rest_cherrypy: webhook_disable_auth` | `False` | `True`: hooks need no token |
//! | `rest_cherrypy:` any other key (`debug`, `log_access_file`, `collect_stats`, `static`, `app`, ...) | | not implemented: named in a warning at start |
//! | `token_expire` | `43200` | seconds a login token is valid |
//! | `token_expire_user_override` | `False` | who may ask for their own `token_expire` at `/login` and `/token`: `True` (everyone), or a map of eauth backend to user names |
//! | `auth.pam.service` | `login` | the PAM service the `pam` eauth backend uses |
//! | `halite_pam_confdir` | (PAM's, `/etc/pam.d`) | Halite's own: a directory of PAM service files used instead (`pam_start_confdir`) |
//! | `external_auth` | `{}` | eauth backends and their users' rules (`crate::acl`) |
//! | `timeout` | `5` | seconds a `local` call waits for returns (a chunk's `timeout` overrides it) |
//! | `netapi_enable_clients` | `[]` | the lowstate clients served (Salt 3006's rule: none unless listed; another is a 400 "Client disabled") |

use std::path::PathBuf;

use serde_json::Value as J;

use halite_master::MasterConfig;

/// Why the master config cannot serve salt-api (each names the option to fix).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("salt-api: the master config has no rest_cherrypy section")]
    NoSection,
    #[error("salt-api: rest_cherrypy:port must be a port number")]
    Port,
    #[error("salt-api: rest_cherrypy:ssl_crt and ssl_key are required unless disable_ssl: True")]
    NoCertificate,
    #[error("salt-api: token_expire must be 1 to {max} seconds")]
    TokenExpire { max: u64 },
    #[error("salt-api: token_expire_user_override must be True, False or a map of eauth backend to a list of user names")]
    ExpireOverride,
    #[error("salt-api: netapi_enable_clients must be a list of client names")]
    EnabledClients,
    #[error("salt-api: rest_cherrypy:{key} must be {what}")]
    Option { key: &'static str, what: &'static str },
}

/// The options salt-api uses.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    pub host: String,
    pub port: u16,
    pub max_body: usize,
    pub max_connections: usize,
    pub token_expire: u64,
    /// `token_expire_user_override`: who may set their token's lifetime.
    pub expire_override: ExpireOverride,
    pub external_auth: J,
    pub sock_dir: PathBuf,
    pub timeout: u64,
    pub pam_service: String,
    /// `ssl_crt`, `ssl_key`: serve HTTPS (`None`: `disable_ssl: True`, plain HTTP).
    pub tls: Option<(PathBuf, PathBuf)>,
    pub pam_confdir: Option<PathBuf>,
    /// `netapi_enable_clients`: the clients served.
    pub enabled_clients: Vec<String>,
    /// `rest_cherrypy: webhook_url`: where hooks are posted (`/hook`).
    pub webhook_url: String,
    /// `rest_cherrypy: webhook_disable_auth`: hooks without a token.
    pub webhook_disable_auth: bool,
}

/// `token_expire_user_override`, as Salt's `_allow_custom_expire` reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ExpireOverride {
    /// `False` (the default): a login's `token_expire` is dropped.
    #[default]
    Nobody,
    /// `True`: every user's.
    Everyone,
    /// eauth backend -> the users whose `token_expire` is honoured.
    Users(std::collections::BTreeMap<String, Vec<String>>),
}

impl ExpireOverride {
    fn read(v: &J) -> Result<ExpireOverride, ConfigError> {
        match v {
            J::Null | J::Bool(false) => Ok(ExpireOverride::Nobody),
            J::Bool(true) => Ok(ExpireOverride::Everyone),
            J::Object(m) => {
                let mut users = std::collections::BTreeMap::new();
                for (eauth, list) in m {
                    let names = match list {
                        J::Null => vec![],
                        // One name (Salt tests membership in the value; a list is what it documents).
                        J::String(u) => vec![u.clone()],
                        J::Array(a) => a.iter().map(|u| u.as_str().map(str::to_string).ok_or(ConfigError::ExpireOverride)).collect::<Result<_, _>>()?,
                        _ => return Err(ConfigError::ExpireOverride),
                    };
                    users.insert(eauth.clone(), names);
                }
                Ok(ExpireOverride::Users(users))
            }
            _ => Err(ConfigError::ExpireOverride),
        }
    }

    /// Whether `user` (authenticated through `eauth`) may set their token's lifetime.
    pub fn allows(&self, eauth: &str, user: &str) -> bool {
        match self {
            ExpireOverride::Nobody => false,
            ExpireOverride::Everyone => true,
            ExpireOverride::Users(m) => m.get(eauth).is_some_and(|names| names.iter().any(|n| n == user)),
        }
    }
}

/// The `rest_cherrypy` keys salt-api reads.
pub const READ_KEYS: [&str; 9] = ["port", "host", "disable_ssl", "ssl_crt", "ssl_key", "max_request_body_size", "thread_pool", "webhook_url", "webhook_disable_auth"];

impl ApiConfig {
    pub fn from_master(cfg: &MasterConfig) -> Result<ApiConfig, ConfigError> {
        let get = |k: &str| cfg.raw.get(k).map(|v| serde_json::to_value(v).unwrap_or(J::Null)).unwrap_or(J::Null);
        let rc = get("rest_cherrypy");
        if !rc.is_object() {
            return Err(ConfigError::NoSection);
        }
        let port = rc.get("port").and_then(|p| p.as_u64().or_else(|| p.as_str().and_then(|s| s.parse().ok()))).filter(|p| (1..=65535).contains(p)).ok_or(ConfigError::Port)?;
        let truthy = |v: Option<&J>| matches!(v, Some(J::Bool(true))) || v.and_then(J::as_str).is_some_and(|s| s.eq_ignore_ascii_case("true"));
        let tls = if truthy(rc.get("disable_ssl")) {
            None
        } else {
            let path = |k: &str| rc.get(k).and_then(J::as_str).filter(|s| !s.is_empty()).map(PathBuf::from);
            match (path("ssl_crt"), path("ssl_key")) {
                (Some(c), Some(k)) => Some((c, k)),
                _ => return Err(ConfigError::NoCertificate),
            }
        };
        let num = |v: Option<&J>, d: u64| v.and_then(|p| p.as_u64().or_else(|| p.as_str().and_then(|s| s.parse().ok()))).unwrap_or(d);
        let token_expire = num(cfg.raw.get("token_expire").map(|v| serde_json::to_value(v).unwrap_or(J::Null)).as_ref(), 43200);
        if token_expire == 0 || token_expire > halite_master::admin::tokens::MAX_EXPIRE_SECS {
            return Err(ConfigError::TokenExpire { max: halite_master::admin::tokens::MAX_EXPIRE_SECS });
        }
        let expire_override = ExpireOverride::read(&get("token_expire_user_override"))?;
        let enabled_clients = match get("netapi_enable_clients") {
            J::Null => Vec::new(),
            J::Array(a) => a.iter().map(|c| c.as_str().map(str::to_string).ok_or(ConfigError::EnabledClients)).collect::<Result<Vec<_>, _>>()?,
            _ => return Err(ConfigError::EnabledClients),
        };
        for k in rc.as_object().into_iter().flatten().map(|(k, _)| k).filter(|k| !READ_KEYS.contains(&k.as_str())) {
            tracing::warn!("salt-api: rest_cherrypy:{k} is not implemented by Halite's salt-api; ignored");
        }
        let webhook_url = match rc.get("webhook_url") {
            None | Some(J::Null) => "/hook".to_string(),
            Some(J::String(u)) if u.starts_with('/') && u.len() > 1 && u.len() <= 256 && !u.contains(['?', '#']) => u.trim_end_matches('/').to_string(),
            Some(_) => return Err(ConfigError::Option { key: "webhook_url", what: "a path such as /hook" }),
        };
        if ["/", "/login", "/logout", "/token", "/run", "/minions", "/jobs", "/keys", "/events"].iter().any(|p| webhook_url == *p || webhook_url.starts_with(&format!("{p}/")) && *p != "/") {
            return Err(ConfigError::Option { key: "webhook_url", what: "a path no other endpoint uses" });
        }
        if enabled_clients.is_empty() {
            tracing::warn!("salt-api: netapi_enable_clients lists no client: every lowstate call will be refused (as Salt's salt-api refuses it); list the clients to serve, e.g. [local, local_async, runner, wheel]");
        }
        Ok(ApiConfig {
            enabled_clients,
            webhook_url,
            webhook_disable_auth: truthy(rc.get("webhook_disable_auth")),
            host: rc.get("host").and_then(J::as_str).unwrap_or("0.0.0.0").to_string(),
            port: port as u16,
            max_body: num(rc.get("max_request_body_size"), 1 << 20).min(64 << 20) as usize,
            max_connections: num(rc.get("thread_pool"), 100).clamp(1, 10_000) as usize,
            token_expire,
            expire_override,
            external_auth: get("external_auth"),
            sock_dir: cfg.sock_dir.clone(),
            timeout: cfg.timeout.max(1),
            tls,
            pam_service: get("auth.pam.service").as_str().filter(|s| !s.is_empty()).unwrap_or("login").to_string(),
            pam_confdir: get("halite_pam_confdir").as_str().filter(|s| !s.is_empty()).map(PathBuf::from),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn token_expire_user_override_as_salt_reads_it() {
        assert_eq!(ExpireOverride::read(&J::Null), Ok(ExpireOverride::Nobody));
        assert!(!ExpireOverride::read(&json!(false)).unwrap().allows("file", "fred"));
        assert!(ExpireOverride::read(&json!(true)).unwrap().allows("pam", "anyone"));
        let m = ExpireOverride::read(&json!({"file": ["fred"], "pam": "alice"})).unwrap();
        assert!(m.allows("file", "fred") && m.allows("pam", "alice"));
        assert!(!m.allows("pam", "fred") && !m.allows("file", "fre") && !m.allows("ldap", "fred"), "by backend, whole names");
        for bad in [json!("yes"), json!(1), json!({"file": [1]}), json!({"file": {"fred": true}})] {
            assert_eq!(ExpireOverride::read(&bad), Err(ConfigError::ExpireOverride), "{bad}");
        }
    }
}
