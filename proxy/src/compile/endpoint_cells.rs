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

/// The cells of one compile's upstreams by Service (`namespace`, `name`).
#[derive(Debug, Default)]
pub struct EndpointCells {
    by_service: FastHashMap<(String, String), Vec<Entry>>,
}

impl EndpointCells {
    pub(crate) fn record(&mut self, namespace: &str, name: &str, port: PortKey, u: &Upstream) {
        let entries = self
            .by_service
            .entry((namespace.to_string(), name.to_string()))
            // Most Services have one port: a first push would reserve four.
            .or_insert_with(|| Vec::with_capacity(1));
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
    pub(crate) fn of_service(
        &self,
        service: &(String, String),
    ) -> Option<(&(String, String), &Vec<Entry>)> {
        self.by_service.get_key_value(service)
    }

    /// Cells recorded.
    pub fn len(&self) -> usize {
        self.by_service.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_service.is_empty()
    }
}
