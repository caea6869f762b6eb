//! Test helpers that read OpenMetrics text back.

/// One sample line: metric name, labels in order, value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Parses the sample lines (not `#` lines); label values must not contain `,` or `"`.
pub(crate) fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("sample has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}').expect("closing brace")),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once("=\"").expect("label has a value");
                    (key.to_string(), value.trim_end_matches('"').to_string())
                })
                .collect();
            let value = match value {
                "+Inf" => f64::INFINITY,
                value => value.parse().expect("numeric value"),
            };
            Sample { name: name.to_string(), labels, value }
        })
        .collect()
}

/// The `# TYPE` of each family, in order.
pub(crate) fn types(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect()
}

/// The value of the sample with exactly this name and these labels (in any order).
pub(crate) fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text)
        .into_iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels.iter().all(|(ek, ev)| s.labels.iter().any(|(k, v)| k == ek && v == ev))
        })
        .map(|s| s.value)
}
