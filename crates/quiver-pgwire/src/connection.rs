//! One PostgreSQL connection: encryption negotiated (TLS when the server has a certificate,
//! through `SSLRequest` or PostgreSQL 17's direct TLS; GSS encryption refused, so the client
//! goes on in the clear), then pgwire's message processing in a loop that writes replies in
//! batches.
//!
//! With TLS configured, a client that is not on this machine must encrypt: its unencrypted
//! startup is refused (`28000`), which keeps passive listeners and misconfigured clients out
//! (only `sslmode=verify-ca` / `verify-full` protect against an active man in the middle:
//! SCRAM here has no channel binding). Loopback clients may still connect in the clear, and
//! CancelRequests are taken in the clear from anywhere, as PostgreSQL does.
//!
//! pgwire flushes the socket after nearly every reply (ParseComplete, BindComplete,
//! CommandComplete, ReadyForQuery), so a pipelined query cost three `send` calls, and on
//! loopback each also wakes the client. Here replies are held while the client has already
//! sent the next complete request, and written out in one call before the connection waits
//! for more input: a client waiting for an answer always gets it at once, and a pipelining
//! client gets many answers per call. At most [`MAX_HELD_BYTES`] are held.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, DefaultClient, NoopHandler, PgWireConnectionState};
use pgwire::messages::response::{GssEncResponse, SslResponse};
use pgwire::messages::SslNegotiationMetaMessage;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{process_error, process_message, PgWireMessageServerCodec};
use quiver_tls::{TlsAcceptor, TlsStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use tokio_util::either::Either;

use super::errors::{fatal, sqlstate};
use super::handler::Prepared;
use super::PgServer;

/// Replies held at most before they are written anyway.
const MAX_HELD_BYTES: usize = 64 << 10;

/// How long a client may take to finish startup (as pgwire allows), TLS handshake included.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The ALPN identifier of the PostgreSQL protocol, which direct TLS requires.
const POSTGRES_ALPN: &[u8] = b"postgresql";

type Socket = Framed<HeldWrites, PgWireMessageServerCodec<Arc<Prepared>>>;

/// Serves one connection until the client leaves (or breaks the protocol).
pub(super) async fn serve(stream: TcpStream, server: Arc<PgServer>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let addr = stream.peer_addr()?;
    let startup_deadline = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_deadline);
    let mut socket = tokio::select! {
        () = &mut startup_deadline => return Ok(()),
        negotiated = negotiate(stream, addr, server.tls.as_ref()) => match negotiated? {
            Some(socket) => socket,
            None => return Ok(()),
        },
    };
    socket.set_state(PgWireConnectionState::AwaitingStartup);
    let copy = Arc::new(NoopHandler);
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        if starting || !has_complete_message(socket.read_buffer()) {
            // About to wait for the client: everything it should see goes out now.
            socket.get_mut().holding = false;
            socket.flush().await?;
        }
        let message = if starting {
            tokio::select! {
                () = &mut startup_deadline => None,
                message = socket.next() => message,
            }
        } else {
            socket.next().await
        };
        let message = match message {
            Some(Ok(PgWireFrontendMessage::Terminate(_))) | None => break,
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                tracing::debug!(%addr, error = %e, "PostgreSQL protocol error");
                process_error(&mut socket, e, false).await?;
                break;
            }
        };
        socket.get_mut().holding = !starting;
        let extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        let processed = process_message(
            message,
            &mut socket,
            server.startup.clone(),
            server.handler.clone(),
            server.handler.clone(),
            copy.clone(),
            server.cancels.clone(),
        )
        .await;
        if let Err(e) = processed {
            process_error(&mut socket, e, extended_query).await?;
        }
    }
    socket.get_mut().holding = false;
    let _ = socket.flush().await;
    Ok(())
}

/// A framed connection over `transport`, before startup.
fn framed(transport: Transport, addr: SocketAddr) -> Socket {
    let secure = matches!(transport, Either::Right(_));
    let codec = PgWireMessageServerCodec::new(DefaultClient::new(addr, secure));
    Framed::new(HeldWrites::new(transport), codec)
}

/// Settles encryption up to the client's startup message: the connection to go on with, or
/// `None` if it ends here (the client left, broke the protocol, or must encrypt and did not).
async fn negotiate(
    stream: TcpStream,
    addr: SocketAddr,
    tls: Option<&TlsAcceptor>,
) -> io::Result<Option<Socket>> {
    if starts_with_tls_handshake(&stream).await? {
        // PostgreSQL 17's direct TLS (`sslnegotiation=direct`): it requires ALPN.
        let Some(acceptor) = tls else {
            return Ok(None);
        };
        let stream = handshake(acceptor, stream).await?;
        if stream.get_ref().1.alpn_protocol() != Some(POSTGRES_ALPN) {
            tracing::debug!(%addr, "direct TLS without the postgresql ALPN: refused");
            return Ok(None);
        }
        return negotiate_inside(framed(Either::Right(Box::new(stream)), addr), addr).await;
    }
    let mut socket = framed(Either::Left(stream), addr);
    loop {
        match socket.next().await {
            Some(Ok(PgWireFrontendMessage::SslNegotiation(
                SslNegotiationMetaMessage::PostgresSsl(_),
            ))) => match tls {
                Some(acceptor) => {
                    let Some(stream) = accept_tls(socket, acceptor).await? else {
                        return Ok(None);
                    };
                    return negotiate_inside(framed(Either::Right(Box::new(stream)), addr), addr)
                        .await;
                }
                None => {
                    socket
                        .send(PgWireBackendMessage::SslResponse(SslResponse::Refuse))
                        .await?
                }
            },
            Some(Ok(PgWireFrontendMessage::SslNegotiation(
                SslNegotiationMetaMessage::PostgresGss(_),
            ))) => {
                socket
                    .send(PgWireBackendMessage::GssEncResponse(GssEncResponse::Refuse))
                    .await?
            }
            Some(Ok(PgWireFrontendMessage::SslNegotiation(SslNegotiationMetaMessage::None))) => {
                // A CancelRequest carries no credentials and nothing secret but its key, and
                // clients send it on a fresh connection, often unencrypted (pgjdbc, libpq's
                // PQcancel): PostgreSQL takes it in the clear too.
                let cancel = is_cancel_request(socket.read_buffer());
                if tls.is_some() && !cancel && !quiver_auth::is_loopback(addr.ip()) {
                    let refusal = fatal(
                        sqlstate::INVALID_AUTHORIZATION,
                        "this server takes connections from other machines only over TLS: connect with sslmode=require or sslmode=verify-full",
                    );
                    process_error(&mut socket, refusal, false).await?;
                    return Ok(None);
                }
                return Ok(Some(socket));
            }
            _ => return Ok(None),
        }
    }
}

/// Accepts the client's `SSLRequest` and performs the TLS handshake on the raw connection.
async fn accept_tls(
    mut socket: Socket,
    acceptor: &TlsAcceptor,
) -> io::Result<Option<TlsStream<TcpStream>>> {
    socket
        .send(PgWireBackendMessage::SslResponse(SslResponse::Accept))
        .await?;
    if !socket.read_buffer().is_empty() {
        // Bytes sent after SSLRequest but before the handshake would be taken as coming
        // through TLS (CVE-2021-23214): refused.
        return Ok(None);
    }
    let Either::Left(stream) = socket.into_inner().stream else {
        return Ok(None);
    };
    Ok(Some(handshake(acceptor, stream).await?))
}

/// The TLS handshake, counted when it fails.
async fn handshake(acceptor: &TlsAcceptor, stream: TcpStream) -> io::Result<TlsStream<TcpStream>> {
    acceptor.accept(stream).await.inspect_err(|_| {
        quiver_tls::Protocol::Postgres.handshake_failed();
    })
}

/// Inside TLS, only the startup message may follow (a second `SSLRequest` or a GSS request
/// breaks the protocol).
async fn negotiate_inside(mut socket: Socket, addr: SocketAddr) -> io::Result<Option<Socket>> {
    match socket.next().await {
        Some(Ok(PgWireFrontendMessage::SslNegotiation(SslNegotiationMetaMessage::None))) => {
            Ok(Some(socket))
        }
        _ => {
            tracing::debug!(%addr, "a second encryption request inside TLS: refused");
            Ok(None)
        }
    }
}

/// The code a CancelRequest carries where a startup message has its protocol version.
const CANCEL_REQUEST_CODE: u32 = 80877102;

/// True if `buffer` starts with a CancelRequest (length, then [`CANCEL_REQUEST_CODE`]).
fn is_cancel_request(buffer: &BytesMut) -> bool {
    buffer.len() >= 8 && buffer[4..8] == CANCEL_REQUEST_CODE.to_be_bytes()
}

/// True if the client opened with a TLS ClientHello instead of the PostgreSQL protocol.
async fn starts_with_tls_handshake(stream: &TcpStream) -> io::Result<bool> {
    let mut first = [0u8; 1];
    let n = stream.peek(&mut first).await?;
    Ok(n > 0 && first[0] == 0x16)
}

/// True if `buffer` holds at least one whole message (type byte, length, body).
fn has_complete_message(buffer: &BytesMut) -> bool {
    if buffer.len() < 5 {
        return false;
    }
    // The length counts itself but not the type byte.
    let length = u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]) as usize;
    buffer.len() > length
}

/// The connection's stream, holding written bytes while `holding` is set (see the module
/// documentation): writes land in `held` and flushes do nothing, up to [`MAX_HELD_BYTES`].
pub(super) struct HeldWrites {
    stream: Transport,
    held: BytesMut,
    holding: bool,
}

impl HeldWrites {
    fn new(stream: Transport) -> Self {
        HeldWrites {
            stream,
            held: BytesMut::new(),
            holding: false,
        }
    }

    /// Writes out what is held.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut self.stream).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for HeldWrites {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for HeldWrites {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.holding && this.held.len() + buf.len() <= MAX_HELD_BYTES {
            this.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.holding {
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

/// The connection under the PostgreSQL protocol: in the clear (left) or inside TLS (right).
type Transport = Either<TcpStream, Box<TlsStream<TcpStream>>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_messages_are_recognised() {
        let mut buffer = BytesMut::new();
        assert!(!has_complete_message(&buffer));
        buffer.extend_from_slice(&[b'S', 0, 0, 0, 4]);
        assert!(has_complete_message(&buffer), "Sync: type and length only");
        let mut partial = BytesMut::from(&[b'Q', 0, 0, 0, 9, b'S'][..]);
        assert!(!has_complete_message(&partial));
        partial.extend_from_slice(b"EL\0");
        assert!(!has_complete_message(&partial));
        partial.extend_from_slice(b"\0");
        assert!(has_complete_message(&partial));
    }
}
