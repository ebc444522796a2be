//! `from-to-www-redirect`: the other name of a rule host (`www.` added or
//! taken off) answered with a redirect, when no rule serves it.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use teapot_api::HostPattern;

use crate::compile::bind::TenantHosts;
use crate::compile::routes::{Route, RoutePolicy, RouteTable};
use crate::compile::traffic::TrafficPolicy;
use crate::compile::upstream::Upstream;

pub(super) const FROM_TO_WWW: &str = "nginx.ingress.kubernetes.io/from-to-www-redirect";

/// The other name of a `from-to-www-redirect` host: `www.<host>`, or
/// `<host>` for a `www.` rule host.
pub(super) struct WwwTwin {
    pub(super) from: HostPattern,
    pub(super) to: Arc<str>,
    pub(super) ingress: Arc<str>,
    pub(super) tenant: Option<Arc<crate::live::fairness::TenantGate>>,
}

/// `www.<name>` for `<name>`, `<name>` for `www.<name>`; none for a name
/// whose twin is no valid host (a bare `www.`, a top-level label).
pub(super) fn www_twin(name: &str) -> Option<HostPattern> {
    let twin = match name.strip_prefix("www.") {
        Some(bare) if bare.contains('.') => bare.to_string(),
        Some(_) => return None,
        None => format!("www.{name}"),
    };
    match HostPattern::parse(&twin) {
        Ok(h @ HostPattern::Exact(_)) => Some(h),
        _ => None,
    }
}

/// Whether a tenant may have the twin of one of its hosts answered: by the
/// rule its Ingress hosts follow ([`TenantHosts::admit`]). A custom-domain
/// twin counts only when the Ingress names it in `spec.tls` (the redirect
/// never makes a claim of its own) and DNS proved it.
pub(super) fn twin_admitted<'t>(
    hosts: &mut TenantHosts<'_, 't>,
    tenant: &teapot_model::tenancy::TenantView<'t>,
    twin: &HostPattern,
    ingress: &Ingress,
) -> bool {
    use teapot_api::admission::HostScope;
    match tenant.scope(twin) {
        Ok(HostScope::Assigned | HostScope::Allowed) => hosts.admit(tenant, twin).is_ok(),
        Ok(HostScope::Custom) => {
            let name = twin.to_string();
            let in_tls = ingress
                .spec
                .iter()
                .flat_map(|s| s.tls.iter().flatten())
                .flat_map(|t| t.hosts.iter().flatten())
                .any(|h| h.eq_ignore_ascii_case(&name));
            in_tls && hosts.admit(tenant, twin).is_ok()
        }
        Err(_) => false,
    }
}

/// The twins' redirects, after every rule is in: a name any rule serves
/// keeps its rules (ingress-nginx skips a twin another server has), and of
/// two Ingresses asking for one twin the older answers it.
pub(super) fn add_www_redirects(routes: &mut RouteTable, twins: Vec<WwwTwin>) {
    for twin in twins {
        let HostPattern::Exact(name) = &twin.from else {
            continue;
        };
        if routes.has_exact_host(name) {
            continue;
        }
        let upstream = Arc::new(Upstream::new(
            format!("from-to-www-redirect to {}", twin.to),
            Vec::new(),
            None,
        ));
        let traffic = TrafficPolicy {
            www_redirect: Some(twin.to),
            ..TrafficPolicy::default()
        };
        let policy = RoutePolicy {
            max_body_size: None,
            tenant: twin.tenant,
            traffic: Some(Arc::new(traffic)),
        };
        let route = Route::new(upstream, Some(Arc::new(policy)), twin.ingress);
        routes.host_mut(Some(&twin.from)).set_fallback(route);
    }
}
