//! The Kubernetes-style condition every compile reports in (Ingress,
//! Service, Gateway and route status): below the snapshot, so the parts
//! that report do not import the snapshot that holds their reports.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// A Kubernetes-style condition. Type, status and reason are fixed words,
/// so they cost no allocation per Ingress and compile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Condition {
    /// True with `ok_reason` when `problems` is empty, else False with
    /// `problem_reason` and the problems joined.
    pub fn unless_problems(
        type_: &'static str,
        problems: &[String],
        ok_reason: &'static str,
        problem_reason: &'static str,
    ) -> Condition {
        if problems.is_empty() {
            Condition::new(type_, true, ok_reason, "")
        } else {
            Condition::new(type_, false, problem_reason, problems.join("; "))
        }
    }

    pub fn new(
        type_: &'static str,
        ok: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            type_,
            status: if ok { "True" } else { "False" },
            reason,
            message: message.into(),
        }
    }

    /// As the API's condition of an object of `generation`. Its
    /// `lastTransitionTime` is the epoch: the compile reads no clock; the
    /// status writer stamps the time when it applies a change.
    pub fn to_meta(&self, generation: Option<i64>) -> MetaCondition {
        MetaCondition {
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            message: self.message.clone(),
            observed_generation: generation,
            reason: self.reason.into(),
            status: self.status.into(),
            type_: self.type_.into(),
        }
    }

    /// Whether it is `type_` and True.
    pub fn is_true(&self, type_: &str) -> bool {
        self.type_ == type_ && self.status == "True"
    }
}
