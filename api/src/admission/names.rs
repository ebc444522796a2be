//! Kubernetes name formats, with messages that say what is allowed.

use super::quote;

/// An RFC 1123 label: 1-63 of `a-z 0-9 -`, starting and ending with a
/// letter or digit (namespaces, most names).
pub fn dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 {
        return Err(format!("{} must be 1 to 63 characters long", quote(s)));
    }
    let ok = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit",
            quote(s)
        ))
    }
}

/// An RFC 1035 label: an RFC 1123 label that starts with a letter
/// (Service names).
pub fn dns1035_label(s: &str) -> Result<(), String> {
    dns_label(s)?;
    if s.starts_with(|c: char| c.is_ascii_lowercase()) {
        Ok(())
    } else {
        Err(format!("{} must start with a letter", quote(s)))
    }
}

/// An RFC 1123 subdomain: dot-separated labels, at most 253 characters
/// (object names such as Secret and Ingress names).
pub fn dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err(format!("{} must be 1 to 253 characters long", quote(s)));
    }
    if s.split('.').all(|l| dns_label(l).is_ok()) {
        Ok(())
    } else {
        Err(format!(
            "{} must be a DNS subdomain: lowercase letters, digits, '-' and '.' (no '/', no namespace prefix)",
            quote(s)
        ))
    }
}

/// An IANA service name as Kubernetes uses for port names: 1-15 of
/// `a-z 0-9 -`, at least one letter, no leading, trailing or double '-'.
pub fn port_name(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a port name (1-15 lowercase letters, digits and single '-', with at least one letter)",
            quote(s)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert!(dns_label("web-1").is_ok());
        assert!(dns_label("Web").is_err());
        assert!(dns_label("-a").is_err());
        assert!(dns_label(&"a".repeat(64)).is_err());
        assert!(dns1035_label("1web").is_err());
        assert!(dns1035_label("web").is_ok());
        assert!(dns_subdomain("web.shop").is_ok());
        assert!(dns_subdomain("other/web").is_err());
        assert!(dns_subdomain("a..b").is_err());
        assert!(port_name("http").is_ok());
        assert!(port_name("8080").is_err());
        assert!(port_name("a--b").is_err());
        assert!(port_name("abcdefghijklmnop").is_err());
    }
}
