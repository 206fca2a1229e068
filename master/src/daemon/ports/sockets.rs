//! The minion-facing ZeroMQ sockets and their bounds: the request port (`ret_port`,
//! ROUTER) and the publish port (`publish_port`, PUB), built on the TCP listeners of
//! [`crate::daemon::listen`] with the options of the patched `zeromq` crate
//! (`patches/zeromq`, used through `[patch.crates-io]`; see its `README-halite.md`).
//!
//! | port | largest message a peer may send | why |
//! |---|---|---|
//! | request | `halite_max_request_bytes` + [`REQUEST_SLACK`] | a request body, its routing frames and their per-frame charge |
//! | publish | [`PUBLISH_MAX_MESSAGE`] | subscribers send only subscriptions (a byte and a topic) |
//!
//! The bound is checked from each frame's header, before anything is reserved for the
//! frame (`SocketOptions::max_message_size`): a peer that declares more is disconnected,
//! so one connection holds at most about that much, however large a length it declares.
//! The request body's own check (`halite_max_request_bytes`, `wire::envelope::decode`)
//! still applies to what is read.
//!
//! The publish socket keeps at most [`MAX_SUBSCRIPTIONS`] subscriptions per subscriber
//! and queues at most `pub_hwm` publishes per subscriber (Salt's option,
//! default 1000); past that, publishes to a subscriber that does not read are dropped for
//! it, as ZeroMQ's high-water mark does for Salt. Between the daemon and that fan-out,
//! at most `halite_pub_fanout_capacity` publishes wait (the `zeromq` crate's own ring of
//! 100,000 slots took 4 MiB at start); when it is full, publishing waits, nothing is
//! dropped.
//!
//! The request socket queues at most [`REPLIES_PER_PEER`] replies and
//! [`REPLY_BYTES_PER_PEER`] bytes of them for one connection (one reply larger than that
//! goes alone). A salt-minion's REQ socket has one request outstanding, so its queue
//! never holds more than one reply; a client that pipelines requests and never reads
//! the replies finds its queue full, and further replies to it are dropped (counted and
//! logged as `reason="reply_queue_full"` by [`crate::daemon::requests`]), as ZeroMQ's
//! high-water mark drops them for Salt. Each reply is queued on the sender kept for the
//! connection: a clone of it would always have room, and eight such clients would grow
//! a master by 43 MiB every half second, without end.
//!
//! An idle connection holds no read or write buffer (`release_idle_buffers`): a
//! minion's connections are idle nearly all the time, and a buffer kept at the size
//! its largest read grew it to (up to 64 KiB) would be most of a connection's memory.
//!
//! A connection must complete the ZMTP handshake within [`HANDSHAKE_TIMEOUT`], so a
//! peer that connects and stays silent (or trickles its greeting) does not hold a
//! connection and a task for ever.
//!
//! Every peer refused by the transport (a message over the bound, a frame that does not
//! decode, a failed or timed-out handshake) is counted and logged through [`crate::metrics::refuse`]
//! by [`watch`], from the sockets' monitor events, with the peer's address.

use std::collections::HashMap;

use futures::StreamExt;
use zeromq::{CodecError, Socket, SocketEvent, SocketOptions, ZmqError};

use crate::daemon::listen;
use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::metrics::{refuse, Port};

/// Room on the request port for what surrounds a request body: the routing frames and
/// the per-frame charge of the bound (`zeromq::FRAME_OVERHEAD`).
pub const REQUEST_SLACK: usize = 64 << 10;

/// Largest message a subscriber may send on the publish port.
pub const PUBLISH_MAX_MESSAGE: usize = 4 << 10;

/// How long a connection to either port may take to complete the ZMTP handshake
/// (a salt-minion does it at once); a silent or slow peer is closed after it.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Subscriptions kept per subscriber (a salt-minion makes one or two); more are ignored,
/// so a subscriber holds at most 64 × 4 KiB of them.
pub const MAX_SUBSCRIPTIONS: usize = 64;

/// Most peers whose address is remembered for the refusal log (one per connection; past
/// it the memory is cleared and later refusals name the peer by its identity).
const MAX_REMEMBERED_PEERS: usize = 200_000;

/// Replies queued for one request connection (see the module docs): ZeroMQ's default
/// high-water mark, which Salt's request socket keeps. A salt-minion has one
/// outstanding; a client that pipelines requests and reads the replies (a flood of
/// sign-ins, `attacks.rs`) keeps its queue short by reading.
pub const REPLIES_PER_PEER: usize = 1000;

/// Bytes of replies queued for one request connection (one larger reply goes alone):
/// a ping's reply echoes its load, so by count alone a client that never read could
/// make the master hold a thousand of its largest requests.
pub const REPLY_BYTES_PER_PEER: usize = 4 << 20;

/// The request socket's options.
pub fn request_options(cfg: &MasterConfig) -> SocketOptions {
    let mut o = SocketOptions::default();
    o.max_message_size(cfg.halite_max_request_bytes.saturating_add(REQUEST_SLACK));
    o.send_queue_capacity(REPLIES_PER_PEER);
    o.send_queue_bytes(REPLY_BYTES_PER_PEER);
    o.handshake_timeout(HANDSHAKE_TIMEOUT);
    o.accept_fd_limit(crate::daemon::files::connection_fd_limit());
    o.release_idle_buffers(true);
    // A connection's first read is this large, and the adaptive chunk never shrinks
    // below twice it: a request (a return is about 570 bytes, a sign-in about a
    // kilobyte) arrives in one read. From the crate's default of 128 bytes the chunk
    // grows only as reads fill it, and a tenth of the returns of a 1,000-minion blast
    // are read in two pieces (docs/benchmarks.md, "Returns").
    o.read_buffer(REQUEST_READ_CHUNK, 64 << 10, 2);
    o
}

/// The request port's first read and least read chunk (see [`request_options`]).
pub const REQUEST_READ_CHUNK: usize = 2048;

/// The publish socket's options.
pub fn publish_options(cfg: &MasterConfig) -> SocketOptions {
    let mut o = SocketOptions::default();
    o.max_message_size(PUBLISH_MAX_MESSAGE);
    o.handshake_timeout(HANDSHAKE_TIMEOUT);
    o.accept_fd_limit(crate::daemon::files::connection_fd_limit());
    o.send_queue_capacity(cfg.pub_hwm.max(1));
    o.fanout_queue_capacity(cfg.halite_pub_fanout_capacity.max(1));
    o.max_subscriptions(MAX_SUBSCRIPTIONS);
    o.release_idle_buffers(true);
    o
}

fn endpoint(interface: &str, port: u16) -> String {
    if interface.contains(':') {
        format!("tcp://[{interface}]:{port}")
    } else {
        format!("tcp://{interface}:{port}")
    }
}

pub(in crate::daemon) fn bind_err(ep: &str, e: &dyn std::fmt::Display) -> Error {
    Error::refused(format!("binding {ep}: {e}"))
}

/// The request socket, bound on `ret_port`, its refusals watched. Returns it with its
/// endpoint (for the log).
pub async fn request(cfg: &MasterConfig) -> Result<(zeromq::RouterSocket, String)> {
    let mut sock = zeromq::RouterSocket::with_options(request_options(cfg));
    let ep = endpoint(&cfg.interface, cfg.ret_port);
    let listener = listen::bind(&cfg.interface, cfg.ret_port, cfg.ipv6, listen::ListenOptions::request(listen::backlog(cfg))).map_err(|e| bind_err(&ep, &e))?;
    tokio::spawn(watch(Port::Request, sock.monitor()));
    sock.bind_listener(listener).await.map_err(|e| bind_err(&ep, &e))?;
    Ok((sock, ep))
}

/// The publish socket, bound on `publish_port`, its refusals watched.
pub async fn publish(cfg: &MasterConfig) -> Result<(zeromq::PubSocket, String)> {
    let mut sock = zeromq::PubSocket::with_options(publish_options(cfg));
    let ep = endpoint(&cfg.interface, cfg.publish_port);
    let listener = listen::bind(&cfg.interface, cfg.publish_port, cfg.ipv6, listen::ListenOptions::publish(cfg)).map_err(|e| bind_err(&ep, &e))?;
    tokio::spawn(watch(Port::Publish, sock.monitor()));
    sock.bind_listener(listener).await.map_err(|e| bind_err(&ep, &e))?;
    Ok((sock, ep))
}

/// The metric reason of a transport error, or `None` for one that is not the peer's
/// doing (a reset connection, a closed one).
pub fn reason(e: &ZmqError, handshake: bool) -> Option<&'static str> {
    match e {
        ZmqError::Codec(CodecError::MessageTooLarge { .. }) => Some("message_too_large"),
        ZmqError::ConnectTimeout(_) => Some("handshake_timeout"),
        ZmqError::Codec(CodecError::Io(_)) | ZmqError::Network(_) => None,
        _ if handshake => Some("bad_handshake"),
        _ => Some("bad_frame"),
    }
}

/// Counts and logs the peers a socket refused, from its monitor events; remembers each
/// connected peer's address so a refusal names it.
pub async fn watch(port: Port, mut events: futures::channel::mpsc::Receiver<SocketEvent>) {
    let mut peers: HashMap<zeromq::util::PeerIdentity, String> = HashMap::new();
    while let Some(ev) = events.next().await {
        match ev {
            SocketEvent::Accepted(ep, peer) => {
                if peers.len() >= MAX_REMEMBERED_PEERS {
                    peers.clear();
                }
                peers.insert(peer, ep.to_string());
            }
            SocketEvent::Disconnected(peer) => {
                peers.remove(&peer);
            }
            SocketEvent::HandshakeFailed(ep, e) => {
                if let Some(why) = reason(&e, true) {
                    refuse(port, &ep.to_string(), why, &format_args!("connection closed: {e}"));
                }
            }
            SocketEvent::AcceptFailed(e) => {
                // A connection closed at once to keep descriptors for the master's own
                // files (`files.rs`), or an accept that failed (out of descriptors).
                refuse(port, "-", "too_many_connections", &format_args!("{e}"));
            }
            SocketEvent::ReceiveFailed(peer, e) => {
                if let Some(why) = reason(&e, false) {
                    let source = peers.remove(&peer).unwrap_or_else(|| format!("peer {peer:?}"));
                    refuse(port, &source, why, &format_args!("disconnected: {e}"));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What the bounds do is tested against a running master (tools/tests/e2e/hostile.rs)
    // and in the patched crate's codec tests.
    #[test]
    fn refusals_are_told_from_lost_connections() {
        assert_eq!(reason(&ZmqError::Codec(CodecError::MessageTooLarge { size: 9, max: 1 }), true), Some("message_too_large"));
        assert!(reason(&ZmqError::Network(std::io::Error::other("reset")), false).is_none());
        assert_eq!(reason(&ZmqError::Codec(CodecError::Decode("x")), false), Some("bad_frame"));
        assert_eq!(reason(&ZmqError::Other("x"), true), Some("bad_handshake"));
        assert_eq!(reason(&ZmqError::ConnectTimeout(HANDSHAKE_TIMEOUT), true), Some("handshake_timeout"));
    }
}
