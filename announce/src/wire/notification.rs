//! The NOTIFICATION message (RFC 4271 section 4.5): its codes, and how an
//! operator reads one. Below the error type, which carries a received one.

/// NOTIFICATION error codes (RFC 4271 section 4.5).
pub mod code {
    pub const MESSAGE_HEADER: u8 = 1;
    pub const OPEN_MESSAGE: u8 = 2;
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    pub const FSM: u8 = 5;
    pub const CEASE: u8 = 6;
    /// OPEN subcodes.
    pub const BAD_PEER_AS: u8 = 2;
    pub const UNACCEPTABLE_HOLD_TIME: u8 = 6;
    /// CEASE subcode (RFC 4486) sent when the speaker stops.
    pub const ADMINISTRATIVE_SHUTDOWN: u8 = 2;
    /// CEASE subcode (RFC 9384) sent when BFD finds the router gone.
    pub const BFD_DOWN: u8 = 10;
}

/// A NOTIFICATION message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub code: u8,
    pub subcode: u8,
    pub data: Vec<u8>,
}

impl std::fmt::Display for Notification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.code {
            code::MESSAGE_HEADER => "message header error",
            code::OPEN_MESSAGE => "OPEN message error",
            3 => "UPDATE message error",
            code::HOLD_TIMER_EXPIRED => "hold timer expired",
            code::FSM => "finite state machine error",
            code::CEASE => "cease",
            _ => "unknown error",
        };
        write!(f, "{name} ({}/{})", self.code, self.subcode)?;
        if let Some(subcode) = subcode_name(self.code, self.subcode) {
            write!(f, " {subcode}")?;
        }
        // A CEASE may carry a shutdown communication (RFC 9003): a length
        // byte and UTF-8 text the peer's operator wrote. It reaches logs,
        // the peer's status and Events: escaped and bounded, so a peer
        // can neither forge a line (CR, LF) nor drive a terminal (ESC).
        if self.code == code::CEASE
            && let Some((&len, text)) = self.data.split_first()
            && let Some(text) = text.get(..len as usize)
            && !text.is_empty()
        {
            write!(f, ": {}", crate::escape::printable(text))?;
        }
        Ok(())
    }
}

/// What an operator reads in a router's log for the subcodes that come
/// up when a session is refused (RFC 4271 6.2, RFC 4486, RFC 9384).
fn subcode_name(code: u8, subcode: u8) -> Option<&'static str> {
    Some(match (code, subcode) {
        (code::OPEN_MESSAGE, 1) => "Unsupported Version Number",
        (code::OPEN_MESSAGE, code::BAD_PEER_AS) => "Bad Peer AS",
        (code::OPEN_MESSAGE, 3) => "Bad BGP Identifier",
        (code::OPEN_MESSAGE, 4) => "Unsupported Optional Parameter",
        (code::OPEN_MESSAGE, code::UNACCEPTABLE_HOLD_TIME) => "Unacceptable Hold Time",
        (code::OPEN_MESSAGE, 7) => "Unsupported Capability",
        (code::CEASE, 1) => "Maximum Number of Prefixes Reached",
        (code::CEASE, code::ADMINISTRATIVE_SHUTDOWN) => "Administrative Shutdown",
        (code::CEASE, 3) => "Peer De-configured",
        (code::CEASE, 4) => "Administrative Reset",
        (code::CEASE, 5) => "Connection Rejected",
        (code::CEASE, 6) => "Other Configuration Change",
        (code::CEASE, 7) => "Connection Collision Resolution",
        (code::CEASE, 8) => "Out of Resources",
        (code::CEASE, code::BFD_DOWN) => "BFD Down",
        _ => return None,
    })
}
