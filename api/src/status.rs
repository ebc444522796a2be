//! Problems the LB side reports in `status.loadBalancer`, for the agent to
//! read back.
//!
//! Neither Ingress nor Service status has conditions, and annotations
//! cannot be written through `/status`. The one free-form place both have is
//! `status.loadBalancer.ingress[].ports[].error`, which Kubernetes defines
//! for exactly this: "cloud provider specific error values must have names
//! that comply with the format foo.example.com/CamelCase". teapot writes
//! `teapot.dev/<Reason>` there (the proxy), and the agent turns it into a
//! condition and an Event on the tenant's object. The human-readable
//! message stays on the LB side (Events, the admin API).

/// The domain part of every error value teapot writes.
pub const ERROR_DOMAIN: &str = "teapot.dev";

/// `teapot.dev/<reason>` for a `ports[].error`.
pub fn port_error(reason: &str) -> String {
    format!("{ERROR_DOMAIN}/{reason}")
}

/// The reason of a `ports[].error` teapot wrote, `None` for any other
/// value (built-in `Timeout`/`Pending`, another writer's).
pub fn reason_of(error: &str) -> Option<&str> {
    let reason = error.strip_prefix(ERROR_DOMAIN)?.strip_prefix('/')?;
    let camel = reason.starts_with(|c: char| c.is_ascii_uppercase())
        && reason.chars().all(|c| c.is_ascii_alphanumeric());
    camel.then_some(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_and_foreign_values_are_ignored() {
        assert_eq!(port_error("PoolExhausted"), "teapot.dev/PoolExhausted");
        assert_eq!(
            reason_of(&port_error("PoolExhausted")),
            Some("PoolExhausted")
        );
        assert_eq!(reason_of("Pending"), None);
        assert_eq!(reason_of("example.com/PoolExhausted"), None);
        assert_eq!(reason_of("teapot.dev/"), None);
        assert_eq!(reason_of("teapot.dev/not camel"), None);
        assert_eq!(reason_of("teapot.devx/Foo"), None);
    }
}
