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
