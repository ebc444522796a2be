//! Which endpoint cells a compile made, by Service: what an EndpointSlice
//! change refreshes in place (crate::compile::endpoint_sets) and what the
//! resolver (crate::compile::backends) records as it resolves. Apart from
//! both, so that neither imports the other through it.

use std::sync::Arc;

use teapot_model::store::FastHashMap;

use crate::compile::upstream::{EndpointCell, Upstream};

/// A Service port as a cell was resolved for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PortKey {
    Number(i32),
    Name(String),
}

/// A Service port as a backend names it, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PortRef<'a> {
    Number(i32),
    Name(&'a str),
}

impl From<&PortRef<'_>> for PortKey {
    fn from(port: &PortRef<'_>) -> PortKey {
        match port {
            PortRef::Number(n) => PortKey::Number(*n),
            PortRef::Name(n) => PortKey::Name((*n).to_string()),
        }
    }
}

impl<'a> From<&'a PortKey> for PortRef<'a> {
    fn from(port: &'a PortKey) -> PortRef<'a> {
        match port {
            PortKey::Number(n) => PortRef::Number(*n),
            PortKey::Name(n) => PortRef::Name(n),
        }
    }
}

impl std::fmt::Display for PortRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortRef::Number(n) => write!(f, "{n}"),
            PortRef::Name(n) => f.write_str(n),
        }
    }
}

/// A Service port of a namespace, owned: what the last compile's upstreams
/// are kept by (crate::compile::parts). Port names are not validated to
/// hold a letter in manifests mode, so `80` by name and by number differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServicePort {
    pub(crate) service: String,
    pub(crate) port: PortKey,
}

/// [`ServicePort`] borrowed, to find one without building it: a compile
/// looks up every backend it routes to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServicePortRef<'a> {
    pub(crate) service: &'a str,
    pub(crate) port: PortRef<'a>,
}

/// The one hash of both forms, so that the borrowed one finds the owned.
fn hash_service_port<H: std::hash::Hasher>(service: &str, port: PortRef<'_>, state: &mut H) {
    use std::hash::Hash;
    service.hash(state);
    match port {
        PortRef::Number(n) => {
            0u8.hash(state);
            n.hash(state);
        }
        PortRef::Name(n) => {
            1u8.hash(state);
            n.hash(state);
        }
    }
}

impl std::hash::Hash for ServicePort {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        hash_service_port(&self.service, PortRef::from(&self.port), state);
    }
}

impl std::hash::Hash for ServicePortRef<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        hash_service_port(self.service, self.port, state);
    }
}

impl hashbrown::Equivalent<ServicePort> for ServicePortRef<'_> {
    fn equivalent(&self, key: &ServicePort) -> bool {
        self.service == key.service && self.port == PortRef::from(&key.port)
    }
}

impl From<ServicePortRef<'_>> for ServicePort {
    fn from(key: ServicePortRef<'_>) -> ServicePort {
        ServicePort {
            service: key.service.to_string(),
            port: PortKey::from(&key.port),
        }
    }
}

/// One resolved upstream's cell and the facts a compile reported about it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) port: PortKey,
    pub(crate) cell: Arc<EndpointCell>,
    pub(crate) unavailable: Option<String>,
    pub(crate) refused: Vec<String>,
}

/// The cells of one compile's upstreams by Service (`namespace`, `name`),
/// kept per namespace so that a compile hands an unchanged namespace's
/// cells on whole (crate::compile::parts).
#[derive(Debug, Default)]
pub struct EndpointCells {
    by_namespace: FastHashMap<String, NamespaceCells>,
}

/// One namespace's cells, by Service name.
#[derive(Debug, Default)]
pub(crate) struct NamespaceCells {
    by_service: FastHashMap<String, Vec<Entry>>,
}

impl EndpointCells {
    pub(crate) fn record(&mut self, namespace: &str, name: &str, port: PortKey, u: &Upstream) {
        let services = match self.by_namespace.get_mut(namespace) {
            Some(services) => services,
            None => self.by_namespace.entry(namespace.to_string()).or_default(),
        };
        let entries = match services.by_service.get_mut(name) {
            Some(entries) => entries,
            // Most Services have one port: a first push would reserve four.
            None => services
                .by_service
                .entry(name.to_string())
                .or_insert_with(|| Vec::with_capacity(1)),
        };
        if entries.iter().any(|e| Arc::ptr_eq(&e.cell, &u.endpoints)) {
            return;
        }
        entries.push(Entry {
            port,
            cell: Arc::clone(&u.endpoints),
            unavailable: u.unavailable.clone(),
            refused: u.refused.clone(),
        });
    }

    /// The cells recorded for the Service (`namespace`, `name`).
    pub(crate) fn of_service(&self, (namespace, name): &(String, String)) -> Option<&Vec<Entry>> {
        self.by_namespace.get(namespace)?.by_service.get(name)
    }

    /// Takes a namespace's cells out, to hand them to the next compile.
    pub(crate) fn take_namespace(&mut self, namespace: &str) -> Option<NamespaceCells> {
        self.by_namespace.remove(namespace)
    }

    /// Puts a namespace's cells, taken from the last compile, in.
    pub(crate) fn put_namespace(&mut self, namespace: String, cells: NamespaceCells) {
        self.by_namespace.insert(namespace, cells);
    }

    /// Cells recorded.
    pub fn len(&self) -> usize {
        self.by_namespace
            .values()
            .flat_map(|n| n.by_service.values())
            .map(Vec::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A borrowed Service port finds its owned form, by number and by name
    /// apart: `80` by name is another port than 80 by number.
    #[test]
    fn a_borrowed_service_port_finds_the_owned_one_and_no_other() {
        let mut map: FastHashMap<ServicePort, u8> = FastHashMap::default();
        for (i, port) in [
            PortRef::Number(80),
            PortRef::Name("80"),
            PortRef::Name("http"),
        ]
        .into_iter()
        .enumerate()
        {
            let key = ServicePortRef {
                service: "web",
                port,
            };
            map.insert(key.into(), i as u8);
        }
        let find = |service, port| map.get(&ServicePortRef { service, port }).copied();
        assert_eq!(find("web", PortRef::Number(80)), Some(0));
        assert_eq!(find("web", PortRef::Name("80")), Some(1));
        assert_eq!(find("web", PortRef::Name("http")), Some(2));
        assert_eq!(find("web", PortRef::Number(8080)), None);
        assert_eq!(find("api", PortRef::Number(80)), None);
    }
}
