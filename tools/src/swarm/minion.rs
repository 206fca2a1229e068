//! One simulated minion: the salt-minion 3008 wire behaviour the load generator needs,
//! and nothing else (Salt's `salt/channel/client.py` and `salt/crypt.py`).
//!
//! - sign-in: a clear `_auth` on a short-lived REQ socket; every check a real minion
//!   makes on the reply (outer signature, the X9.31 `sig` of the publish key, the nonce,
//!   the echoed `token` on re-auth);
//! - requests: session-encrypted envelopes with `nonce`, `ts` and the X9.31 `tok`, the
//!   reply's nonce checked, `"bad load"` answered by signing in again and resending once;
//! - publishes: decrypted with the publish key (a failure means the key rotated: sign in
//!   again), the serial checked, the target matched on the id, the job run and returned.
//!
//! The minion "runs" `test.ping` (True), `test.echo` (its argument) and `test.arg`; any
//! other function returns Salt's "is not available" message with retcode 254.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmpv::Value;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

use halite_master::wire::crypto::{clean_key, sha256_hex, Crypticle, EncAlgo, PrivateKey, PublicKey, SigAlgo, PICKLE};
use halite_master::matcher::{self, Subject};
use halite_master::wire::payload::{self, bin, get, get_bytes, get_text, map};

const ENC: EncAlgo = EncAlgo::OaepSha1;
const SIG: SigAlgo = SigAlgo::Pkcs1v15Sha1;

#[derive(Debug, thiserror::Error)]
pub enum MinionError {
    #[error("{0}: no reply within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("transport: {0}")]
    Transport(String),
    #[error("the master refused the key (ret False)")]
    Rejected,
    #[error("the master is full (max_minions)")]
    Full,
    #[error("the key is pending acceptance")]
    Pending,
    #[error("bad reply: {0}")]
    BadReply(String),
}

type Result<T> = std::result::Result<T, MinionError>;

/// A minion's identity: id, key pair and the derived values it sends on every request.
pub struct Identity {
    pub id: String,
    pub key: PrivateKey,
    /// clean_key form of the public key (what `_auth` carries as `pub`).
    pub pub_clean: String,
    /// X9.31 of `salt` with the minion key: the `tok` of every request.
    pub tok: Vec<u8>,
    /// The random token sent (encrypted to the master key) on re-auth.
    pub token: String,
}

impl Identity {
    pub fn new(id: String, key: PrivateKey) -> std::result::Result<Self, halite_master::Error> {
        let pub_clean = String::from_utf8_lossy(&clean_key(&key.public_pem()?)).into_owned();
        let tok = key.x931_sign(b"salt")?;
        let token = Crypticle::generate().key_string().to_string();
        Ok(Identity { id, key, pub_clean, tok, token })
    }

    /// Another minion with the same key pair as `other` (and so the same `pub` and
    /// `tok`), its own id and token: no RSA work.
    pub fn sharing(id: String, other: &Identity) -> Self {
        let token = Crypticle::generate().key_string().to_string();
        Identity { id, key: other.key.clone(), pub_clean: other.pub_clean.clone(), tok: other.tok.clone(), token }
    }
}

/// What a successful sign-in hands the minion.
#[derive(Clone)]
pub struct Creds {
    pub aes: Crypticle,
    pub session: Crypticle,
    pub publish_port: u16,
    /// The master's public key, cached as `minion_master.pub` is.
    pub master_pub: PublicKey,
}

/// A request nonce: 32 lowercase hex characters, as salt-minion's uuid4 hex.
pub fn nonce() -> String {
    let mut b = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut b);
    hex::encode(b)
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn t(e: impl std::fmt::Display) -> MinionError {
    MinionError::Transport(e.to_string())
}

/// One request on a fresh REQ socket (as the minion's auth does), with a timeout.
pub async fn request_once(endpoint: &str, body: Vec<u8>, timeout: Duration, what: &'static str) -> Result<Vec<u8>> {
    let mut sock = zeromq::ReqSocket::new();
    tokio::time::timeout(timeout, sock.connect(endpoint)).await.map_err(|_| MinionError::Timeout(what, timeout))?.map_err(t)?;
    sock.send(ZmqMessage::from(body)).await.map_err(t)?;
    let reply = tokio::time::timeout(timeout, sock.recv()).await.map_err(|_| MinionError::Timeout(what, timeout))?.map_err(t)?;
    reply.into_vec().pop().map(|b| b.to_vec()).ok_or_else(|| MinionError::BadReply("empty reply".into()))
}

/// Builds the clear `_auth` request. `master_pub` is the cached master key, if any: the
/// minion then sends its token encrypted to it, as a restarted minion does.
pub fn auth_request(me: &Identity, nonce: &str, master_pub: Option<&PublicKey>) -> Result<Vec<u8>> {
    let mut load = vec![
        (Value::from("cmd"), Value::from("_auth")),
        (Value::from("id"), Value::from(me.id.as_str())),
        (Value::from("nonce"), Value::from(nonce)),
        (Value::from("enc_algo"), Value::from(ENC.name())),
        (Value::from("sig_algo"), Value::from(SIG.name())),
    ];
    if let Some(mp) = master_pub {
        let tok = mp.encrypt_oaep(me.token.as_bytes(), ENC).map_err(|e| MinionError::BadReply(e.to_string()))?;
        load.push((Value::from("token"), bin(tok)));
    }
    load.push((Value::from("pub"), Value::from(me.pub_clean.as_str())));
    Ok(payload::encode(&map([("enc", Value::from("clear")), ("load", Value::Map(load)), ("version", Value::from(3))])))
}

/// Checks an `_auth` reply the way salt-minion does (`salt/crypt.py`, `AsyncAuth`) and returns the credentials.
pub fn auth_reply(me: &Identity, nonce: &str, reply: &[u8], cached: Option<&PublicKey>) -> Result<Creds> {
    let bad = |m: &str| MinionError::BadReply(m.to_string());
    let outer = payload::decode(reply).map_err(|e| bad(&e.to_string()))?;
    if let Some(Value::Map(_)) = get(&outer, "load") {
        return Err(bad(&format!("unsigned reply: {}", payload::to_json(&outer))));
    }
    let load = get_bytes(&outer, "load").ok_or_else(|| bad(&format!("no load in {}", payload::to_json(&outer))))?;
    let sig = get_bytes(&outer, "sig").ok_or_else(|| bad("the reply is not signed"))?;
    let inner = payload::decode(load).map_err(|e| bad(&e.to_string()))?;
    let master_pub = match (get_text(&inner, "pub_key"), cached) {
        (Some(_), Some(c)) => c.clone(),
        (Some(pk), None) => PublicKey::from_pem(pk.as_bytes()).map_err(|e| bad(&e.to_string()))?,
        (None, Some(c)) => c.clone(),
        // A pending/rejected answer to a minion with no cached master key is not checked.
        (None, None) => return Err(ret_of(&inner)),
    };
    if !master_pub.verify(load, sig, SIG).unwrap_or(false) {
        return Err(bad("invalid signature on the auth reply"));
    }
    if get_text(&inner, "nonce") != Some(nonce) {
        return Err(bad("the auth reply's nonce is not ours"));
    }
    if get(&inner, "ret").is_some() {
        return Err(ret_of(&inner));
    }
    let dec = |k: &str| -> Result<Vec<u8>> {
        let ct = get_bytes(&inner, k).ok_or_else(|| bad(&format!("no {k} in the accept reply")))?;
        me.key.decrypt_oaep(ct, ENC).map_err(|e| bad(&format!("{k}: {e}")))
    };
    let aes_text = dec("aes")?;
    let recovered = get_bytes(&inner, "sig").and_then(|s| master_pub.x931_recover(s)).ok_or_else(|| bad("no valid sig of the publish key"))?;
    if recovered != sha256_hex(&aes_text).as_bytes() {
        return Err(bad("the publish key's sig does not match"));
    }
    if cached.is_some() && dec("token")? != me.token.as_bytes() {
        return Err(bad("the master did not echo our token"));
    }
    let session = dec("session")?;
    let key = |b: Vec<u8>| Crypticle::from_key_string(&String::from_utf8_lossy(&b)).map_err(|e| bad(&e.to_string()));
    let publish_port = get(&inner, "publish_port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()).ok_or_else(|| bad("no publish_port"))?;
    Ok(Creds { aes: key(aes_text)?, session: key(session)?, publish_port, master_pub })
}

fn ret_of(inner: &Value) -> MinionError {
    match get(inner, "ret") {
        Some(Value::Boolean(true)) => MinionError::Pending,
        Some(Value::Boolean(false)) => MinionError::Rejected,
        Some(v) if payload::text(v) == Some("full") => MinionError::Full,
        other => MinionError::BadReply(format!("unexpected auth ret {other:?}")),
    }
}

/// Encrypts an AES request (`inner` gets `nonce`, `ts`, `tok`, `id`). Returns the body
/// and the nonce the reply must carry.
pub fn aes_request(me: &Identity, session: &Crypticle, inner: Vec<(Value, Value)>) -> Result<(Vec<u8>, String)> {
    aes_request_at(me, session, inner, now_secs())
}

/// [`aes_request`] with a given `ts` (Unix seconds), for tests of stale requests.
pub fn aes_request_at(me: &Identity, session: &Crypticle, mut inner: Vec<(Value, Value)>, ts: i64) -> Result<(Vec<u8>, String)> {
    let n = nonce();
    inner.push((Value::from("id"), Value::from(me.id.as_str())));
    inner.push((Value::from("nonce"), Value::from(n.as_str())));
    inner.push((Value::from("ts"), Value::from(ts)));
    inner.push((Value::from("tok"), bin(me.tok.clone())));
    let mut plain = PICKLE.to_vec();
    plain.extend(payload::encode(&Value::Map(inner)));
    let ct = session.encrypt(&plain).map_err(|e| MinionError::BadReply(e.to_string()))?;
    let env = map([
        ("enc", Value::from("aes")),
        ("load", bin(ct)),
        ("version", Value::from(3)),
        ("id", Value::from(me.id.as_str())),
        ("enc_algo", Value::from(ENC.name())),
        ("sig_algo", Value::from(SIG.name())),
    ]);
    Ok((payload::encode(&env), n))
}

/// What an AES reply said.
pub enum AesReply {
    Value(Value),
    /// `"bad load"`: the session is unknown or expired; sign in again.
    BadLoad,
}

pub fn aes_reply(session: &Crypticle, nonce: &str, reply: &[u8]) -> Result<AesReply> {
    let bad = |m: &str| MinionError::BadReply(m.to_string());
    let v = payload::decode(reply).map_err(|e| bad(&e.to_string()))?;
    let ct = payload::bytes(&v).ok_or_else(|| bad("the reply is not a byte string"))?;
    if ct == b"bad load" {
        return Ok(AesReply::BadLoad);
    }
    let plain = session.decrypt(ct).map_err(|_| bad("the reply does not decrypt with the session key"))?;
    let rest = plain.strip_prefix(PICKLE).ok_or_else(|| bad("no pickle:: prefix"))?;
    if rest.len() < 32 || &rest[..32] != nonce.as_bytes() {
        return Err(bad("the reply's nonce is not ours"));
    }
    Ok(AesReply::Value(payload::decode(&rest[32..]).map_err(|e| bad(&e.to_string()))?))
}

/// A publish that does not decrypt with the minion's publish key: the key rotated.
#[derive(Debug)]
pub struct PublishKeyChanged;

/// A decrypted publish.
pub struct Job {
    pub jid: String,
    pub fun: String,
    pub arg: Vec<Value>,
    pub user: Option<Value>,
    pub matched: bool,
}

/// Decodes a publish frame; `Ok(None)` when it is malformed or replayed (serial).
pub fn publish(id: &str, aes: &Crypticle, last_serial: &mut i64, frame: &[u8]) -> std::result::Result<Option<Job>, PublishKeyChanged> {
    let Ok(env) = payload::decode(frame) else { return Ok(None) };
    if get_text(&env, "enc") != Some("aes") {
        return Ok(None);
    }
    let Some(ct) = get_bytes(&env, "load") else { return Ok(None) };
    let plain = aes.decrypt(ct).map_err(|_| PublishKeyChanged)?;
    let Some(body) = plain.strip_prefix(PICKLE) else { return Ok(None) };
    let Ok(mut load) = payload::decode(body) else { return Ok(None) };
    if let Some(serial) = payload::take(&mut load, "serial") {
        match serial.as_i64() {
            Some(s) if s > *last_serial => *last_serial = s,
            _ => return Ok(None),
        }
    }
    let (Some(jid), Some(fun)) = (get_text(&load, "jid"), get_text(&load, "fun")) else { return Ok(None) };
    let tgt_type = get_text(&load, "tgt_type").unwrap_or("glob");
    let tgt = match get(&load, "tgt") {
        Some(Value::Array(a)) => a.iter().filter_map(payload::text).collect::<Vec<_>>().join(","),
        Some(v) => payload::text(v).unwrap_or("").to_string(),
        None => return Ok(None),
    };
    let empty = serde_json::Value::Object(Default::default());
    let matched = matcher::matches(&Subject { id, grains: &empty, pillar: &empty }, &tgt, tgt_type);
    let arg = match get(&load, "arg") {
        Some(Value::Array(a)) => a.clone(),
        _ => vec![],
    };
    Ok(Some(Job { jid: jid.to_string(), fun: fun.to_string(), arg, user: get(&load, "user").cloned(), matched }))
}

/// Runs a job: `(return, retcode, success)`.
pub fn run(job: &Job) -> (Value, i64, bool) {
    match job.fun.as_str() {
        "test.ping" => (Value::Boolean(true), 0, true),
        "test.echo" => (job.arg.first().cloned().unwrap_or(Value::from("")), 0, true),
        "test.arg" => (map([("args", Value::Array(job.arg.clone()))]), 0, true),
        other => (Value::from(format!("'{other}' is not available.")), 254, false),
    }
}

/// The `_return` load for a job.
/// The start event salt-minion 3008.5 fires once it has signed in and connected
/// (`Minion._fire_master_minion_start`, `enable_legacy_startup_events` off): a
/// `_minion_event` tagged `salt/minion/<id>/start`. It is the minion's first request
/// with its `tok`, which the master checks once a session (an RSA public-key
/// operation), so a job's returns do not carry that check.
pub fn start_event_load(id: &str) -> Vec<(Value, Value)> {
    let started = chrono::Local::now().format("%a %b %e %H:%M:%S %Y");
    vec![
        (Value::from("cmd"), Value::from("_minion_event")),
        (Value::from("pretag"), Value::Nil),
        (Value::from("data"), Value::from(format!("Minion {id} started at {started}"))),
        (Value::from("tag"), Value::from(format!("salt/minion/{id}/start"))),
    ]
}

pub fn return_load(job: &Job) -> Vec<(Value, Value)> {
    let (ret, retcode, success) = run(job);
    let mut l = vec![
        (Value::from("cmd"), Value::from("_return")),
        (Value::from("success"), Value::Boolean(success)),
        (Value::from("return"), ret),
        (Value::from("retcode"), Value::from(retcode)),
        (Value::from("jid"), Value::from(job.jid.as_str())),
        (Value::from("fun"), Value::from(job.fun.as_str())),
        (Value::from("fun_args"), Value::Array(job.arg.clone())),
    ];
    if let Some(u) = &job.user {
        l.push((Value::from("user"), u.clone()));
    }
    l
}
