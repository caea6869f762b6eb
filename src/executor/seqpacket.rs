//! A `SOCK_SEQPACKET` Unix socket on tokio: one datagram per message (no framing to get wrong),
//! and file descriptors passed along with a message (`SCM_RIGHTS`).

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::sys::socket::{AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr};
use tokio::io::Interest;
use tokio::net::UnixDatagram;

/// Largest message either side sends.
pub const MAX_MESSAGE: usize = 1 << 20;

/// The operator's end of the socket. (tokio's datagram socket drives it: `send`/`recv` keep the
/// message boundaries of a sequenced-packet socket as they do a datagram socket's.)
#[derive(Debug)]
pub struct SeqPacket {
    socket: UnixDatagram,
}

impl SeqPacket {
    /// A connected pair: this end (non-blocking, on the runtime) and the other end for a child
    /// process (blocking, close-on-exec until it is made the child's descriptor).
    pub fn pair() -> io::Result<(SeqPacket, OwnedFd)> {
        let (ours, theirs) = nix::sys::socket::socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let ours = std::os::unix::net::UnixDatagram::from(ours);
        ours.set_nonblocking(true)?;
        Ok((SeqPacket { socket: UnixDatagram::from_std(ours)? }, theirs))
    }

    /// Sends one message with `fds` attached.
    pub async fn send(&self, message: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        let fd = self.socket.as_raw_fd();
        let sent = self
            .socket
            .async_io(Interest::WRITABLE, || {
                let rights = [ControlMessage::ScmRights(&raw)];
                let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &rights };
                nix::sys::socket::sendmsg::<UnixAddr>(
                    fd,
                    &[IoSlice::new(message)],
                    cmsgs,
                    MsgFlags::MSG_NOSIGNAL,
                    None,
                )
                .map_err(io::Error::from)
            })
            .await?;
        if sent != message.len() {
            return Err(io::Error::other(format!("sent {sent} of {} bytes", message.len())));
        }
        Ok(())
    }

    /// Receives one message; `None` when the peer is gone.
    pub async fn recv(&self) -> io::Result<Option<Vec<u8>>> {
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let fd = self.socket.as_raw_fd();
        let received = self
            .socket
            .async_io(Interest::READABLE, || {
                nix::sys::socket::recv(fd, &mut buffer, MsgFlags::MSG_TRUNC).map_err(io::Error::from)
            })
            .await?;
        if received == 0 {
            return Ok(None);
        }
        if received > MAX_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("message of {received} bytes truncated"),
            ));
        }
        buffer.truncate(received);
        Ok(Some(buffer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Passing descriptors is exercised end to end by every warm run (tests/executor.rs): taking
    // a received descriptor back into Rust needs `unsafe`, which this crate forbids.
    #[tokio::test]
    async fn messages_keep_their_boundaries_and_the_end_is_seen() {
        let (ours, theirs) = SeqPacket::pair().unwrap();
        let theirs = std::os::unix::net::UnixDatagram::from(theirs);
        ours.send(b"first", &[]).await.unwrap();
        ours.send(b"second", &[]).await.unwrap();
        let mut buffer = [0u8; 64];
        assert_eq!(theirs.recv(&mut buffer).unwrap(), 5);
        assert_eq!(theirs.recv(&mut buffer).unwrap(), 6);
        theirs.send(b"reply").unwrap();
        theirs.send(b"again").unwrap();
        assert_eq!(ours.recv().await.unwrap().as_deref(), Some(&b"reply"[..]));
        assert_eq!(ours.recv().await.unwrap().as_deref(), Some(&b"again"[..]));
        drop(theirs);
        assert_eq!(ours.recv().await.unwrap(), None, "end of file when the peer closes");
    }
}
