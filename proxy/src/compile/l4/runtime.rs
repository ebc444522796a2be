//! What binding decides after the compile: each listener's bind state
//! and the generation the manager applied, shared by the manager (the
//! writer) and the reports (read when `/status` renders them).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use super::pool::ListenerKey;

/// Bind state of each listener, shared by the manager (writer) and the
/// `/status` report (reader).
#[derive(Debug, Default)]
pub struct Runtime {
    states: Mutex<HashMap<ListenerKey, Result<(), String>>>,
    pub applied: std::sync::atomic::AtomicU64,
}

impl Runtime {
    /// Generation of the last table the manager applied.
    pub fn applied(&self) -> u64 {
        self.applied.load(std::sync::atomic::Ordering::Acquire)
    }

    /// `listening`, `pending` (not bound yet) or `bind failed: …`.
    pub fn state(&self, key: &ListenerKey) -> String {
        match self.states.lock().get(key) {
            Some(Ok(())) => "listening".into(),
            Some(Err(e)) => format!("bind failed: {e}"),
            None => "pending".into(),
        }
    }

    pub fn set(&self, key: ListenerKey, state: Result<(), String>) {
        self.states.lock().insert(key, state);
    }

    pub fn remove(&self, key: &ListenerKey) {
        self.states.lock().remove(key);
    }
}

/// A listener's bind state, read from the manager when rendered (binding
/// happens after the compile).
#[derive(Debug)]
pub struct LiveState {
    runtime: Arc<Runtime>,
    key: ListenerKey,
}

impl LiveState {
    pub(super) fn new(runtime: Arc<Runtime>, key: ListenerKey) -> LiveState {
        LiveState { runtime, key }
    }

    /// `listening`, `pending` or the bind error, now.
    pub fn now(&self) -> String {
        self.runtime.state(&self.key)
    }
}

impl Serialize for LiveState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.runtime.state(&self.key))
    }
}

/// Read from the manager when rendered.
#[derive(Debug)]
pub struct AppliedGeneration(pub(super) Arc<Runtime>);

impl Serialize for AppliedGeneration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0.applied())
    }
}
