//! Encrypted connections from a TCP listener, as axum and tonic serve them (see the crate
//! documentation).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::TcpConnectInfo;

use crate::{Protocol, ServerTls, HANDSHAKE_TIMEOUT};

/// Handshakes in progress at most; past it new connections are closed until one ends.
const MAX_PENDING_HANDSHAKES: usize = 1024;

/// Handshakes in progress at most from one client address.
const MAX_PENDING_HANDSHAKES_PER_ADDRESS: usize = 64;

/// How long a new connection may wait before sending its first byte (a TLS client sends its
/// ClientHello at once).
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(3);

/// One client connection after its TLS handshake.
#[derive(Debug)]
pub struct TlsConnection {
    stream: TlsStream<TcpStream>,
    peer: SocketAddr,
    local: SocketAddr,
}

impl TlsConnection {
    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
}

/// The connections of one TCP listener, each after a successful TLS handshake. Failed or
/// timed-out handshakes are logged at debug level and dropped.
#[derive(Debug)]
pub struct TlsIncoming {
    connections: mpsc::Receiver<TlsConnection>,
    local: SocketAddr,
}

impl TlsIncoming {
    /// Starts accepting on `listener` (on the current tokio runtime), handshaking as `tls`
    /// serves `protocol`. Accepting stops when this value is dropped. On HTTP, a client that
    /// sends a plain request (`http://` instead of `https://`) gets a plain 400 saying so.
    pub fn new(listener: TcpListener, tls: &ServerTls, protocol: Protocol) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (sender, connections) = mpsc::channel(64);
        let acceptor = tls.acceptor(protocol);
        tokio::spawn(accept_loop(listener, acceptor, protocol, sender));
        Ok(TlsIncoming { connections, local })
    }

    /// The next connection; `None` once the accept loop ended (it never does on its own).
    pub async fn next(&mut self) -> Option<TlsConnection> {
        self.connections.recv().await
    }

    /// The connections as a stream, for `tonic`'s `serve_with_incoming`.
    pub fn into_stream(self) -> impl futures::Stream<Item = io::Result<TlsConnection>> {
        futures::stream::unfold(self, |mut incoming| async move {
            let connection = incoming.next().await?;
            Some((Ok(connection), incoming))
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    protocol: Protocol,
    sender: mpsc::Sender<TlsConnection>,
) {
    let pending = Arc::new(PendingHandshakes::default());
    loop {
        let (stream, peer) = tokio::select! {
            () = sender.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Over a limit, the new connection is closed at once: accepting goes on for others.
        let Some(slot) = pending.enter(peer.ip()) else {
            tracing::debug!(%peer, "too many TLS handshakes in progress: connection closed");
            protocol.handshake_failed();
            continue;
        };
        let acceptor = acceptor.clone();
        let sender = sender.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let handshake = handshake(&acceptor, protocol, stream, peer);
            let connection = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(connection) => connection,
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    protocol.handshake_failed();
                    None
                }
            };
            if let Some(connection) = connection {
                let _ = sender.send(connection).await;
            }
        });
    }
}

/// Handshakes in progress, in all and per client address.
#[derive(Debug, Default)]
struct PendingHandshakes {
    by_address: Mutex<HashMap<IpAddr, usize>>,
}

impl PendingHandshakes {
    /// A slot for a handshake from `address`, or `None` over [`MAX_PENDING_HANDSHAKES`] or
    /// [`MAX_PENDING_HANDSHAKES_PER_ADDRESS`].
    fn enter(self: &Arc<Self>, address: IpAddr) -> Option<PendingSlot> {
        let mut by_address = self.by_address.lock();
        let total: usize = by_address.values().sum();
        let mine = by_address.entry(address).or_default();
        if total >= MAX_PENDING_HANDSHAKES || *mine >= MAX_PENDING_HANDSHAKES_PER_ADDRESS {
            if *mine == 0 {
                by_address.remove(&address);
            }
            return None;
        }
        *mine += 1;
        Some(PendingSlot {
            pending: self.clone(),
            address,
        })
    }
}

/// One handshake's place in [`PendingHandshakes`], given back when dropped.
struct PendingSlot {
    pending: Arc<PendingHandshakes>,
    address: IpAddr,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        let mut by_address = self.pending.by_address.lock();
        if let Some(count) = by_address.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                by_address.remove(&self.address);
            }
        }
    }
}

async fn handshake(
    acceptor: &TlsAcceptor,
    protocol: Protocol,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<TlsConnection> {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().ok()?;
    let mut first = [0u8; 1];
    match tokio::time::timeout(FIRST_BYTE_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => {
            tracing::debug!(%peer, "no TLS handshake started: connection closed");
            protocol.handshake_failed();
            return None;
        }
    }
    if protocol == Protocol::Http && first[0].is_ascii_uppercase() {
        // An HTTP request line (a method's capital letter) rather than a TLS record (0x16).
        protocol.handshake_failed();
        refuse_plain_http(stream).await;
        return None;
    }
    match acceptor.accept(stream).await {
        Ok(stream) => Some(TlsConnection {
            stream,
            peer,
            local,
        }),
        Err(e) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            protocol.handshake_failed();
            None
        }
    }
}

/// Answers a plain HTTP request on the HTTPS port with a 400 saying so. The request is read
/// first (what arrives within a moment, up to 16 KiB), so that closing does not reset the
/// connection before the client reads the answer.
async fn refuse_plain_http(mut stream: TcpStream) {
    let mut request = vec![0u8; 16 << 10];
    let mut read = 0;
    let drain = async {
        while read < request.len() {
            match stream.read(&mut request[read..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
            if request[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    let _ = stream.write_all(plain_http_refusal().as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The answer to an unencrypted HTTP request on the HTTPS port.
fn plain_http_refusal() -> String {
    let body =
        r#"{"error":"this port serves HTTPS only: connect with https:// (the server has TLS on)"}"#;
    format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

impl axum::serve::Listener for TlsIncoming {
    type Io = TlsConnection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.next().await {
            Some(connection) => {
                let peer = connection.peer;
                (connection, peer)
            }
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

impl tonic::transport::server::Connected for TlsConnection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        TcpConnectInfo {
            local_addr: Some(self.local),
            remote_addr: Some(self.peer),
        }
    }
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_handshakes_are_bounded_per_address_and_in_all() {
        let pending = Arc::new(PendingHandshakes::default());
        let one: IpAddr = "192.0.2.1".parse().unwrap();
        let mut slots: Vec<PendingSlot> = (0..MAX_PENDING_HANDSHAKES_PER_ADDRESS)
            .map(|_| pending.enter(one).expect("under the per-address bound"))
            .collect();
        assert!(pending.enter(one).is_none(), "one address is bounded");
        slots.pop();
        assert!(
            pending.enter(one).is_some(),
            "a finished handshake frees its slot"
        );

        let others: Vec<PendingSlot> = (0..MAX_PENDING_HANDSHAKES)
            .map_while(|i| pending.enter(IpAddr::from([10, 0, (i >> 8) as u8, i as u8])))
            .collect();
        assert_eq!(
            others.len(),
            MAX_PENDING_HANDSHAKES - (MAX_PENDING_HANDSHAKES_PER_ADDRESS - 1),
            "the total is bounded"
        );
        drop(others);
        drop(slots);
        assert!(
            pending.by_address.lock().is_empty(),
            "nothing is left once every handshake ended"
        );
    }
}
