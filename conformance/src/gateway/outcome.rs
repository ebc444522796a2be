//! One case's or status check's result, as the runner ([`super::runner`])
//! and the status checks ([`super::status`]) report it.

/// One case's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseOutcome {
    pub name: String,
    pub failure: Option<String>,
}
