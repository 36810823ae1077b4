//! One PostgreSQL connection: SSL and GSS encryption requests refused (the client then goes on
//! in the clear, as with a PostgreSQL server without TLS), then pgwire's message processing in
//! a loop that writes replies in batches.
//!
//! pgwire flushes the socket after nearly every reply (ParseComplete, BindComplete,
//! CommandComplete, ReadyForQuery), so a pipelined query cost three `send` calls, and on
//! loopback each also wakes the client. Here replies are held while the client has already
//! sent the next complete request, and written out in one call before the connection waits
//! for more input: a client waiting for an answer always gets it at once, and a pipelining
//! client gets many answers per call. At most [`MAX_HELD_BYTES`] are held.

use std::io;
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
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::handler::Prepared;
use super::PgServer;

/// Replies held at most before they are written anyway.
const MAX_HELD_BYTES: usize = 64 << 10;

/// How long a client may take to finish startup (as pgwire allows).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

type Socket = Framed<HeldWrites, PgWireMessageServerCodec<Arc<Prepared>>>;

/// Serves one connection until the client leaves (or breaks the protocol).
pub(super) async fn serve(stream: TcpStream, server: Arc<PgServer>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let addr = stream.peer_addr()?;
    if starts_with_tls_handshake(&stream).await? {
        return Ok(()); // direct TLS: not offered
    }
    let codec = PgWireMessageServerCodec::new(DefaultClient::new(addr, false));
    let mut socket: Socket = Framed::new(HeldWrites::new(stream), codec);
    let startup_deadline = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_deadline);
    tokio::select! {
        () = &mut startup_deadline => return Ok(()),
        refused = refuse_encryption(&mut socket) => if !refused? { return Ok(()) },
    }
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

/// True if the client opened with a TLS ClientHello instead of the PostgreSQL protocol.
async fn starts_with_tls_handshake(stream: &TcpStream) -> io::Result<bool> {
    let mut first = [0u8; 1];
    let n = stream.peek(&mut first).await?;
    Ok(n > 0 && first[0] == 0x16)
}

/// Answers "no" to SSL and GSS encryption requests until the client sends its startup
/// message; false if it went away instead.
async fn refuse_encryption(socket: &mut Socket) -> io::Result<bool> {
    loop {
        let refusal = match socket.next().await {
            Some(Ok(PgWireFrontendMessage::SslNegotiation(
                SslNegotiationMetaMessage::PostgresSsl(_),
            ))) => PgWireBackendMessage::SslResponse(SslResponse::Refuse),
            Some(Ok(PgWireFrontendMessage::SslNegotiation(
                SslNegotiationMetaMessage::PostgresGss(_),
            ))) => PgWireBackendMessage::GssEncResponse(GssEncResponse::Refuse),
            Some(Ok(PgWireFrontendMessage::SslNegotiation(SslNegotiationMetaMessage::None))) => {
                return Ok(true)
            }
            _ => return Ok(false),
        };
        socket.send(refusal).await?;
    }
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
    stream: TcpStream,
    held: BytesMut,
    holding: bool,
}

impl HeldWrites {
    fn new(stream: TcpStream) -> Self {
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
