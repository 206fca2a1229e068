use std::sync::Arc;

#[cfg(feature = "tokio-runtime")]
use tokio::net::{TcpListener, TcpStream};

#[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
use async_std::net::{TcpListener, TcpStream};

#[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
use super::make_framed;
use super::AcceptStopHandle;
use crate::async_rt;
use crate::codec::FramedIo;
use crate::endpoint::{Endpoint, Host, Port};
use crate::task_handle::TaskHandle;
use crate::ZmqResult;

use futures::{select, FutureExt};

#[cfg(feature = "tokio-runtime")]
const TCP_SOCKET_BUFFER_SIZE: usize = 4 * 1024 * 1024;

/// How long the accept loop waits after a failed `accept` (e.g. `EMFILE`) before it
/// tries again.
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Refuses (closes) an accepted connection whose descriptor number is at or above
/// `limit` (see `SocketOptions::accept_fd_limit`).
fn within_fd_limit(raw_socket: &TcpStream, limit: Option<u64>) -> std::io::Result<()> {
    #[cfg(unix)]
    if let Some(limit) = limit {
        use std::os::unix::io::AsRawFd;
        let fd = raw_socket.as_raw_fd();
        if u64::try_from(fd).map_or(false, |fd| fd >= limit) {
            return Err(std::io::Error::other(format!(
                "accepted connection on descriptor {fd}, at or above the limit {limit}: closed"
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = (raw_socket, limit);
    Ok(())
}

/// A TCP connection's framed halves. Under tokio the stream is split into its owned
/// halves (`TcpStream::into_split`), which read and write through the shared socket
/// without a lock: `tokio::io::split` puts one mutex in front of both, taken by every
/// read and every write, so a connection's reader and writer tasks contend for it.
#[cfg(feature = "tokio-runtime")]
fn make_framed(stream: TcpStream, options: Arc<crate::SocketOptions>) -> FramedIo {
    use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
    let (read, write) = stream.into_split();
    FramedIo::new(
        Box::new(read.compat()),
        Box::new(WriteHalf(Some(write)).compat_write()),
        options,
    )
}

/// The write half of a split TCP connection that, like `tokio::io::split`'s, leaves the
/// connection alone when dropped: the socket closes once both halves are gone.
/// (`OwnedWriteHalf` on its own shuts the write direction down when dropped.)
#[cfg(feature = "tokio-runtime")]
struct WriteHalf(Option<tokio::net::tcp::OwnedWriteHalf>);

#[cfg(feature = "tokio-runtime")]
impl WriteHalf {
    fn get(&mut self) -> std::io::Result<std::pin::Pin<&mut tokio::net::tcp::OwnedWriteHalf>> {
        match self.0.as_mut() {
            Some(w) => Ok(std::pin::Pin::new(w)),
            None => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }
}

#[cfg(feature = "tokio-runtime")]
impl Drop for WriteHalf {
    fn drop(&mut self) {
        if let Some(w) = self.0.take() {
            w.forget();
        }
    }
}

#[cfg(feature = "tokio-runtime")]
impl tokio::io::AsyncWrite for WriteHalf {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get() {
            Ok(w) => w.poll_write(cx, buf),
            Err(e) => std::task::Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get() {
            Ok(w) => w.poll_write_vectored(cx, bufs),
            Err(e) => std::task::Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(|w| w.is_write_vectored())
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get() {
            Ok(w) => w.poll_flush(cx),
            Err(e) => std::task::Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get() {
            Ok(w) => w.poll_shutdown(cx),
            Err(e) => std::task::Poll::Ready(Err(e)),
        }
    }
}

pub(crate) async fn connect(
    host: &Host,
    port: Port,
    options: Arc<crate::SocketOptions>,
) -> ZmqResult<(FramedIo, Endpoint)> {
    let raw_socket = TcpStream::connect((host.to_string().as_str(), port)).await?;
    // For some reason set_nodelay doesn't work on windows. See
    // https://github.com/zeromq/zmq.rs/issues/148 for details
    #[cfg(not(windows))]
    raw_socket.set_nodelay(true)?;
    tune_socket_buffers(&raw_socket);
    let peer_addr = raw_socket.peer_addr()?;

    Ok((
        make_framed(raw_socket, options),
        Endpoint::from_tcp_addr(peer_addr),
    ))
}

pub(crate) async fn begin_accept<T>(
    host: Host,
    port: Port,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind((host.to_string().as_str(), port)).await?;
    let resolved_addr = listener.local_addr()?;
    debug_assert_ne!(resolved_addr.port(), 0);
    let endpoint = Endpoint::Tcp(host, resolved_addr.port());
    begin_accept_bound(listener, endpoint, options, cback).await
}

pub(crate) async fn begin_accept_listener<T>(
    listener: std::net::TcpListener,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let resolved_addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;

    #[cfg(feature = "tokio-runtime")]
    let listener = TcpListener::from_std(listener)?;
    #[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
    let listener = TcpListener::from(listener);

    begin_accept_bound(
        listener,
        Endpoint::from_tcp_addr(resolved_addr),
        options,
        cback,
    )
    .await
}

async fn begin_accept_bound<T>(
    listener: TcpListener,
    endpoint: Endpoint,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let (stop_channel, stop_callback) = futures::channel::oneshot::channel::<()>();
    let task_handle = async_rt::task::spawn(async move {
        let mut stop_callback = stop_callback.fuse();
        loop {
            select! {
                incoming = listener.accept().fuse() => {
                    // Out of descriptors (or buffers), accept fails at once for as long
                    // as the shortage lasts: pause instead of spinning on it.
                    let pause = incoming.is_err();
                    let maybe_accepted: Result<_, _> = incoming
                        .and_then(|(raw_socket, remote_addr)| {
                            within_fd_limit(&raw_socket, options.accept_fd_limit)?;
                            raw_socket
                                .set_nodelay(true)
                                .map(|_| {
                                    tune_socket_buffers(&raw_socket);
                                    (raw_socket, remote_addr)
                                })
                        })
                        .map(|(raw_socket, remote_addr)| {
                            (
                                make_framed(raw_socket, Arc::clone(&options)),
                                Endpoint::from_tcp_addr(remote_addr),
                            )
                        })
                        .map_err(|err| err.into());
                    async_rt::task::spawn(cback(maybe_accepted));
                    if pause {
                        async_rt::task::sleep(ACCEPT_ERROR_PAUSE).await;
                    }
                }
                _ = stop_callback => {
                    break
                }
            }
        }
        Ok(())
    });
    Ok((
        endpoint,
        AcceptStopHandle(TaskHandle::new(stop_channel, task_handle)),
    ))
}

#[cfg(feature = "tokio-runtime")]
fn tune_socket_buffers(raw_socket: &TcpStream) {
    let socket = socket2::SockRef::from(raw_socket);
    if let Err(error) = socket.set_recv_buffer_size(TCP_SOCKET_BUFFER_SIZE) {
        log::debug!("failed to set TCP receive buffer size: {error}");
    }
    if let Err(error) = socket.set_send_buffer_size(TCP_SOCKET_BUFFER_SIZE) {
        log::debug!("failed to set TCP send buffer size: {error}");
    }
}

#[cfg(not(feature = "tokio-runtime"))]
fn tune_socket_buffers(_raw_socket: &TcpStream) {}
