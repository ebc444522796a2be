//! ingress-nginx's `server-alias`: more names for the server of an
//! Ingress's first rule host, each answering with every path that host
//! has (whichever Ingress added it), as nginx's `server_name` list does.
//! An alias is a host claim like a rule host: in a tenant namespace it
//! must be one the tenant may serve (crate::compile::bind::TenantHosts),
//! and one that already has rules of its own keeps them.

use teapot_api::HostPattern;
use teapot_api::annotations::NGINX_PREFIX;

use crate::compile::routes::RouteTable;

/// The annotation's key.
pub(super) const SERVER_ALIAS: &str = "nginx.ingress.kubernetes.io/server-alias";

/// Most names one Ingress's `server-alias` may add: as many as a few
/// hostnames written out, not a way to claim a zone name by name.
pub(super) const MAX_ALIASES: usize = 16;

/// One alias to add once every Ingress's rules are in the table.
#[derive(Debug)]
pub(super) struct Alias {
    pub(super) name: String,
    pub(super) of: HostPattern,
    /// The Ingress's status report it is told on.
    pub(super) report: usize,
}

/// The alias names of `value` (comma-separated exact host names,
/// lowercase): `Err` when one is not an exact host name or there are more
/// than [`MAX_ALIASES`].
pub(super) fn names(value: &str) -> Result<Vec<HostPattern>, String> {
    let mut out: Vec<HostPattern> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match HostPattern::parse(item) {
            Ok(host @ HostPattern::Exact(_)) => {
                if !out.contains(&host) {
                    out.push(host);
                }
            }
            _ => {
                return Err(format!(
                    "{NGINX_PREFIX}server-alias: {item:?} is not a host name (no wildcard, no port); no alias is served"
                ));
            }
        }
    }
    if out.len() > MAX_ALIASES {
        return Err(format!(
            "{NGINX_PREFIX}server-alias: {} names, at most {MAX_ALIASES}; no alias is served",
            out.len()
        ));
    }
    Ok(out)
}

/// Adds `aliases` to `routes`; an alias a host of its own already has is
/// reported through `taken` with its report index.
pub(super) fn add_aliases(
    routes: &mut RouteTable,
    aliases: Vec<Alias>,
    mut taken: impl FnMut(usize, String),
) {
    for alias in aliases {
        if !routes.alias(&alias.name, &alias.of) {
            taken(
                alias.report,
                format!(
                    "{NGINX_PREFIX}server-alias: {} has rules of its own (or {} none); the alias is not served",
                    alias.name, alias.of
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_exact_hosts_within_the_bound() {
        let hosts = names(" bar , Baz.example,bar").unwrap();
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[1].to_string(), "baz.example");
        assert!(names("*.example").is_err());
        assert!(names("a.example:8080").is_err());
        let many: Vec<String> = (0..=MAX_ALIASES).map(|i| format!("h{i}.example")).collect();
        assert!(names(&many.join(",")).is_err());
        let most: Vec<String> = (0..MAX_ALIASES).map(|i| format!("h{i}.example")).collect();
        assert_eq!(names(&most.join(",")).unwrap().len(), MAX_ALIASES);
    }
}
