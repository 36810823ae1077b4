//! Encrypted connections from a TCP listener, as axum and tonic serve them (see the crate
//! documentation).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::TcpConnectInfo;

use crate::{Protocol, ServerTls, HANDSHAKE_TIMEOUT};

/// Handshakes in progress at most; past it the listener stops accepting until one ends.
const MAX_PENDING_HANDSHAKES: usize = 1024;

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
    let pending = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        let permit = tokio::select! {
            () = sender.closed() => return,
            permit = pending.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
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
        let acceptor = acceptor.clone();
        let sender = sender.clone();
        tokio::spawn(async move {
            let _permit = permit;
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

async fn handshake(
    acceptor: &TlsAcceptor,
    protocol: Protocol,
    mut stream: TcpStream,
    peer: SocketAddr,
) -> Option<TlsConnection> {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().ok()?;
    if protocol == Protocol::Http1 && sends_plain_http(&stream).await {
        protocol.handshake_failed();
        let _ = stream.write_all(plain_http_refusal().as_bytes()).await;
        let _ = stream.shutdown().await;
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

/// The answer to an unencrypted HTTP request on the HTTPS port.
fn plain_http_refusal() -> String {
    let body =
        r#"{"error":"this port serves HTTPS only: connect with https:// (the server has TLS on)"}"#;
    format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// True if the client opened with what looks like an HTTP request line (a method's capital
/// letter) rather than a TLS record (`0x16`).
async fn sends_plain_http(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first).await, Ok(1) if first[0].is_ascii_uppercase())
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
