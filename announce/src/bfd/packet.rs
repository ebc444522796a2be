//! The BFD control packet without authentication (RFC 5880 4.1): encoded,
//! and decoded with the reception checks of RFC 5880 6.8.6.

use std::time::Duration;

use super::State;
use crate::Error;

/// A control packet without authentication.
pub const PACKET_LEN: usize = 24;
const VERSION: u8 = 1;

/// Diagnostic codes (RFC 5880 4.1).
pub mod diag {
    pub const NONE: u8 = 0;
    pub const DETECTION_TIME_EXPIRED: u8 = 1;
    pub const NEIGHBOR_SIGNALED_DOWN: u8 = 3;
    pub const ADMINISTRATIVELY_DOWN: u8 = 7;

    pub fn text(code: u8) -> &'static str {
        match code {
            NONE => "no diagnostic",
            DETECTION_TIME_EXPIRED => "control detection time expired",
            2 => "echo function failed",
            NEIGHBOR_SIGNALED_DOWN => "neighbor signaled session down",
            4 => "forwarding plane reset",
            5 => "path down",
            6 => "concatenated path down",
            ADMINISTRATIVELY_DOWN => "administratively down",
            8 => "reverse concatenated path down",
            _ => "unknown diagnostic",
        }
    }
}

/// A control packet without authentication (RFC 5880 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPacket {
    pub diag: u8,
    pub state: State,
    pub poll: bool,
    pub final_: bool,
    pub control_plane_independent: bool,
    pub demand: bool,
    pub detect_mult: u8,
    pub my_discriminator: u32,
    pub your_discriminator: u32,
    pub desired_min_tx: Duration,
    pub required_min_rx: Duration,
    pub required_min_echo_rx: Duration,
}

fn micros(d: Duration) -> [u8; 4] {
    u32::try_from(d.as_micros())
        .unwrap_or(u32::MAX)
        .to_be_bytes()
}

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl ControlPacket {
    pub fn encode(&self) -> [u8; PACKET_LEN] {
        let mut b = [0u8; PACKET_LEN];
        b[0] = (VERSION << 5) | (self.diag & 0x1f);
        b[1] = (self.state.bits() << 6)
            | (self.poll as u8) << 5
            | (self.final_ as u8) << 4
            | (self.control_plane_independent as u8) << 3
            | (self.demand as u8) << 1;
        b[2] = self.detect_mult;
        b[3] = PACKET_LEN as u8;
        b[4..8].copy_from_slice(&self.my_discriminator.to_be_bytes());
        b[8..12].copy_from_slice(&self.your_discriminator.to_be_bytes());
        b[12..16].copy_from_slice(&micros(self.desired_min_tx));
        b[16..20].copy_from_slice(&micros(self.required_min_rx));
        b[20..24].copy_from_slice(&micros(self.required_min_echo_rx));
        b
    }

    /// The reception checks of RFC 5880 6.8.6 that need no session: a
    /// packet failing one is discarded.
    pub fn decode(b: &[u8]) -> Result<ControlPacket, Error> {
        let bad = |reason: String| Err(Error::BfdPacket(reason));
        if b.len() < PACKET_LEN {
            return bad(format!("{} bytes, a control packet has 24", b.len()));
        }
        if b[0] >> 5 != VERSION {
            return bad(format!("version {}", b[0] >> 5));
        }
        let flags = b[1];
        if flags & 0x04 != 0 {
            return bad("authentication present, none configured".into());
        }
        let length = b[3] as usize;
        if length < PACKET_LEN || length > b.len() {
            return bad(format!(
                "length field {length} in a {}-byte packet",
                b.len()
            ));
        }
        if b[2] == 0 {
            return bad("detect multiplier 0".into());
        }
        if flags & 0x01 != 0 {
            return bad("multipoint bit set".into());
        }
        let packet = ControlPacket {
            diag: b[0] & 0x1f,
            state: State::from_bits(flags >> 6),
            poll: flags & 0x20 != 0,
            final_: flags & 0x10 != 0,
            control_plane_independent: flags & 0x08 != 0,
            demand: flags & 0x02 != 0,
            detect_mult: b[2],
            my_discriminator: word(b, 4),
            your_discriminator: word(b, 8),
            desired_min_tx: Duration::from_micros(word(b, 12) as u64),
            required_min_rx: Duration::from_micros(word(b, 16) as u64),
            required_min_echo_rx: Duration::from_micros(word(b, 20) as u64),
        };
        if packet.my_discriminator == 0 {
            return bad("my discriminator 0".into());
        }
        if packet.your_discriminator == 0 && !matches!(packet.state, State::Down | State::AdminDown)
        {
            return bad(format!(
                "your discriminator 0 in state {}",
                packet.state.as_str()
            ));
        }
        Ok(packet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_packet_matches_hand_assembled_bytes() {
        let packet = ControlPacket {
            diag: diag::DETECTION_TIME_EXPIRED,
            state: State::Up,
            poll: true,
            final_: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discriminator: 0x0102_0304,
            your_discriminator: 0xa0b0_c0d0,
            desired_min_tx: Duration::from_millis(100),
            required_min_rx: Duration::from_millis(300),
            required_min_echo_rx: Duration::ZERO,
        };
        let bytes = [
            0x21, // version 1, diag 1
            0xe0, // state Up (3 << 6), Poll
            3,    // detect mult
            24,   // length
            0x01, 0x02, 0x03, 0x04, // my discriminator
            0xa0, 0xb0, 0xc0, 0xd0, // your discriminator
            0x00, 0x01, 0x86, 0xa0, // 100,000 µs
            0x00, 0x04, 0x93, 0xe0, // 300,000 µs
            0, 0, 0, 0, // no echo
        ];
        assert_eq!(packet.encode(), bytes);
        assert_eq!(ControlPacket::decode(&bytes).unwrap(), packet);

        // AdminDown with Final, the way a graceful stop answers a poll.
        let admin = [
            0x27, 0x10, 5, 24, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0x0f, 0x42, 0x40, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let decoded = ControlPacket::decode(&admin).unwrap();
        assert_eq!(decoded.state, State::AdminDown);
        assert_eq!(decoded.diag, diag::ADMINISTRATIVELY_DOWN);
        assert!(decoded.final_ && !decoded.poll);
        assert_eq!(decoded.desired_min_tx, Duration::from_secs(1));
        assert_eq!(decoded.required_min_rx, Duration::ZERO);
        assert_eq!(decoded.encode(), admin);
    }

    #[test]
    fn packets_failing_rfc_5880_checks_are_discarded() {
        let good = ControlPacket {
            diag: 0,
            state: State::Up,
            poll: false,
            final_: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discriminator: 7,
            your_discriminator: 9,
            desired_min_tx: Duration::from_millis(100),
            required_min_rx: Duration::from_millis(100),
            required_min_echo_rx: Duration::ZERO,
        }
        .encode();
        let with = |f: &dyn Fn(&mut [u8; 24])| {
            let mut b = good;
            f(&mut b);
            ControlPacket::decode(&b).unwrap_err().to_string()
        };
        assert!(with(&|b| b[0] = 0x40).contains("version 2"));
        assert!(with(&|b| b[1] |= 0x04).contains("authentication"));
        assert!(with(&|b| b[2] = 0).contains("multiplier 0"));
        assert!(with(&|b| b[1] |= 0x01).contains("multipoint"));
        assert!(with(&|b| b[3] = 23).contains("length field 23"));
        assert!(with(&|b| b[3] = 25).contains("length field 25"));
        assert!(with(&|b| b[4..8].fill(0)).contains("my discriminator 0"));
        assert!(with(&|b| b[8..12].fill(0)).contains("your discriminator 0 in state Up"));
        assert!(
            ControlPacket::decode(&good[..20])
                .unwrap_err()
                .to_string()
                .contains("20 bytes")
        );
        // Your Discriminator 0 is how a session starts.
        let mut first = good;
        first[1] = 1 << 6;
        first[8..12].fill(0);
        assert_eq!(ControlPacket::decode(&first).unwrap().state, State::Down);
    }
}
