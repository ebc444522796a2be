//! The hostname scheme (docs/architecture.md, "Hostnames and hosts") and the names the
//! agent gives mirrored objects.

/// Longest DNS label.
pub const MAX_LABEL: usize = 63;

/// Five hex characters of SHA-256: enough to keep shortened names apart.
pub fn hash5(input: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    digest.as_ref()[..3]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()[..5]
        .to_string()
}

/// Shortens `name` to at most `max` characters, replacing the tail with
/// `-<hash5 of the whole name>` when it is too long, so different long
/// names stay different.
pub fn shorten(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let hash = hash5(name);
    let keep = max - hash.len() - 1;
    let head = name[..keep].trim_end_matches('-');
    format!("{head}-{hash}")
}

/// The INGRESS label of an LB-cluster Ingress: its name `<name>.<namespace>`
/// (as the agent writes it) with dots turned into dashes, lowercased,
/// shortened past 63 characters.
pub fn ingress_label(lb_ingress_name: &str) -> String {
    shorten(
        &lb_ingress_name.replace('.', "-").to_ascii_lowercase(),
        MAX_LABEL,
    )
}

/// `INGRESS.CLUSTER.lb.DOMAIN` for an LB-cluster Ingress.
pub fn assigned_hostname(lb_ingress_name: &str, cluster: &str, domain: &str) -> String {
    format!("{}.{cluster}.lb.{domain}", ingress_label(lb_ingress_name))
}

/// The suffix every assigned hostname of a tenant ends with:
/// `CLUSTER.lb.DOMAIN`.
pub fn tenant_zone(cluster: &str, domain: &str) -> String {
    format!("{cluster}.lb.{domain}")
}

/// Name of the LB-side Ingress for a tenant Ingress.
pub fn mirrored_ingress_name(namespace: &str, name: &str) -> String {
    format!("{name}.{namespace}")
}

/// Name of the LB-side Service mirroring a tenant Service:
/// `<namespace>-<service>-<hash5>`, at most 63 characters.
pub fn mirrored_service_name(namespace: &str, service: &str) -> String {
    let hash = hash5(&format!("{namespace}/{service}"));
    let head = shorten(
        &format!("{namespace}-{service}"),
        MAX_LABEL - hash.len() - 1,
    );
    format!("{head}-{hash}")
}

/// Name of the LB Secret copied from a tenant Secret: the same scheme as
/// mirrored Services, so secrets of different namespaces never collide.
pub fn mirrored_secret_name(namespace: &str, secret: &str) -> String {
    mirrored_service_name(namespace, secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assigned_hostnames() {
        assert_eq!(
            assigned_hostname("web.shop", "acme", "example.net"),
            "web-shop.acme.lb.example.net"
        );
        let long = format!("{}.{}", "a".repeat(40), "b".repeat(40));
        let label = ingress_label(&long);
        assert_eq!(label.len(), 63);
        assert_ne!(
            label,
            ingress_label(&format!("{}.{}", "a".repeat(40), "c".repeat(40)))
        );
    }

    #[test]
    fn mirrored_names_fit_a_label() {
        let n = mirrored_service_name("default", "web");
        assert!(n.starts_with("default-web-") && n.len() == "default-web-".len() + 5);
        let long = mirrored_service_name(&"n".repeat(60), &"s".repeat(60));
        assert_eq!(long.len(), 63);
        assert_eq!(hash5("x").len(), 5);
    }
}
