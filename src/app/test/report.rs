//! What `ansible-operator test` prints, and its JUnit XML: a scenario per test suite, a step per
//! test case.

use std::path::PathBuf;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

/// How one scenario went.
#[derive(Debug, Clone)]
pub(super) struct ScenarioResult {
    /// The scenario's name.
    pub name: String,
    /// Its file.
    pub file: PathBuf,
    /// The namespace it ran in.
    pub namespace: String,
    /// Each step, in order.
    pub steps: Vec<StepResult>,
    /// On failure: the CRs' conditions and the newest failed run.
    pub context: String,
    /// With `--record`: where what it produced went (or why it did not).
    pub recorded: Option<String>,
    /// Why the namespace could not be removed, or that it was kept.
    pub cleanup: Option<String>,
    /// From its namespace's creation to its removal.
    pub duration: Duration,
}

/// How one step went.
#[derive(Debug, Clone)]
pub(super) struct StepResult {
    /// The step's name.
    pub name: String,
    /// Its time.
    pub duration: Duration,
    /// Its outcome.
    pub outcome: Outcome,
}

/// A step's outcome.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    /// It held.
    Passed,
    /// It did not: why.
    Failed(String),
    /// Not run: why (none: a step before it failed).
    Skipped(Option<String>),
}

impl ScenarioResult {
    /// Whether no step failed (a step skipped for what it needs passes; after a failure, none
    /// does).
    pub fn passed(&self) -> bool {
        !self.steps.iter().any(|step| matches!(step.outcome, Outcome::Failed(_)))
    }
}

/// The scenario as printed: a verdict line, a line per step, and under the failed step what it
/// saw, then the context.
pub(super) fn render(result: &ScenarioResult) -> String {
    let verdict = if result.passed() { "PASS" } else { "FAIL" };
    let mut text = format!(
        "{verdict} {} ({}, namespace {}) {}\n",
        result.name,
        seconds(result.duration),
        result.namespace,
        result.file.display()
    );
    for step in &result.steps {
        let (mark, time) = match &step.outcome {
            Outcome::Passed => ("ok     ", seconds(step.duration)),
            Outcome::Failed(_) => ("FAILED ", seconds(step.duration)),
            Outcome::Skipped(_) => ("skipped", String::new()),
        };
        text.push_str(&format!("  {mark} {:<60} {time}\n", step.name));
        if let Outcome::Failed(why) | Outcome::Skipped(Some(why)) = &step.outcome {
            text.push_str(&indented(why, 11));
        }
    }
    if !result.passed() && !result.context.is_empty() {
        text.push_str(&indented(&result.context, 4));
    }
    for note in [&result.recorded, &result.cleanup].into_iter().flatten() {
        text.push_str(&format!("  {note}\n"));
    }
    text
}

/// The closing line.
pub(super) fn summary(results: &[ScenarioResult], elapsed: Duration) -> String {
    let failed = results.iter().filter(|result| !result.passed()).count();
    format!(
        "{} scenario(s): {} passed, {failed} failed in {}",
        results.len(),
        results.len() - failed,
        seconds(elapsed)
    )
}

/// The results as JUnit XML.
pub(super) fn junit(results: &[ScenarioResult], elapsed: Duration) -> String {
    let mut report = Report::new("ansible-operator test");
    report.set_time(elapsed);
    for result in results {
        let mut suite = TestSuite::new(result.name.clone());
        suite.set_time(result.duration);
        for step in &result.steps {
            let status = match &step.outcome {
                Outcome::Passed => TestCaseStatus::success(),
                Outcome::Skipped(why) => {
                    let mut status = TestCaseStatus::skipped();
                    if let Some(why) = why {
                        status.set_message(why.as_str());
                    }
                    status
                }
                Outcome::Failed(why) => {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    status.set_message(why.lines().next().unwrap_or_default());
                    status.set_description(format!("{why}\n\n{}", result.context));
                    status
                }
            };
            let mut case = TestCase::new(step.name.clone(), status);
            case.set_classname(format!("{}", result.file.display()));
            case.set_time(step.duration);
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    report.to_string().unwrap_or_default()
}

fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

fn indented(text: &str, by: usize) -> String {
    text.lines().map(|line| format!("{:by$}{line}\n", "")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> ScenarioResult {
        let step = |name: &str, outcome| StepResult {
            name: name.into(),
            duration: Duration::from_millis(1500),
            outcome,
        };
        ScenarioResult {
            name: "scale".into(),
            file: "tests/scenarios/scale.yaml".into(),
            namespace: "test-scale-abcde".into(),
            steps: vec![
                step("apply cr.yaml", Outcome::Passed),
                step(
                    "assert Deployment/d",
                    Outcome::Failed("Deployment/d differs:\n  spec.replicas: wanted 3, got 2".into()),
                ),
                step("idempotent Memcached/m", Outcome::Skipped(None)),
            ],
            context: "Memcached/m:\n  Successful=False (Failed) boom".into(),
            recorded: None,
            cleanup: Some("namespace test-scale-abcde kept (--keep)".into()),
            duration: Duration::from_secs(4),
        }
    }

    #[test]
    fn a_failed_scenario_shows_the_step_what_differed_and_the_crs_conditions() {
        let text = render(&result());
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        assert_eq!(lines[0], "FAIL scale (4.0 s, namespace test-scale-abcde) tests/scenarios/scale.yaml");
        assert!(
            lines[1].starts_with("  ok      apply cr.yaml") && lines[1].ends_with("1.5 s"),
            "{}",
            lines[1]
        );
        assert!(lines[2].starts_with("  FAILED  assert Deployment/d"), "{}", lines[2]);
        assert_eq!(lines[3], "           Deployment/d differs:");
        assert_eq!(lines[4], "             spec.replicas: wanted 3, got 2");
        assert!(lines[5].starts_with("  skipped idempotent Memcached/m"), "{}", lines[5]);
        assert_eq!(
            lines[6..],
            [
                "    Memcached/m:",
                "      Successful=False (Failed) boom",
                "  namespace test-scale-abcde kept (--keep)"
            ]
        );
        assert_eq!(
            summary(&[result()], Duration::from_secs(5)),
            "1 scenario(s): 0 passed, 1 failed in 5.0 s"
        );
    }

    #[test]
    fn junit_has_a_suite_per_scenario_and_a_case_per_step() {
        let xml = junit(&[result()], Duration::from_secs(5));
        assert!(
            xml.contains(r#"<testsuite name="scale" tests="3" skipped="1" errors="0" failures="1""#),
            "{xml}"
        );
        assert!(xml.contains(r#"<failure message="Deployment/d differs:""#), "{xml}");
        assert!(xml.contains("<skipped/>"), "{xml}");
    }
}
