//! The classic Prometheus text format (`text/plain; version=0.0.4`), for clients that do not
//! ask for OpenMetrics: curl, `promtool check metrics`, older scrapers.
//!
//! `promtool check metrics` (Prometheus 2.42, Debian 12) parses only this format: given the
//! OpenMetrics exposition it stops at `# TYPE iotop_bpf_build info` ("unknown metric type")
//! and, without that, lints every counter family (`# TYPE x counter` with samples
//! `x_total`) as having no help. The end-to-end test checks this translation with promtool
//! and the OpenMetrics original by a real Prometheus scrape.
//!
//! `prometheus-client` only writes OpenMetrics. For the metrics this exporter writes
//! (counters, gauges, classic histograms, one info metric; no exemplars, no timestamps, no
//! `_created` series) the two formats differ only in metadata, so the OpenMetrics text is
//! translated line by line:
//!
//! - a counter family is named without `_total` in OpenMetrics (`# TYPE x counter`, samples
//!   `x_total`) and with it in the classic format (`# TYPE x_total counter`);
//! - `info` is not a classic type: the family becomes the gauge `x_info`, whose one sample
//!   is already `x_info{…} 1`;
//! - `# UNIT` and `# EOF` have no classic equivalent and are dropped.
//!
//! Sample lines are the same in both: label values are escaped alike (`\\`, `\"`, `\n`),
//! and the exporter writes no exemplars (a comm may contain ` # `, so a sample line is not
//! inspected for one).

/// Translates an OpenMetrics exposition; `Err` names a line it cannot translate (a metric
/// type or shape this exporter never writes).
pub fn from_openmetrics(openmetrics: &str) -> Result<String, String> {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest
                .split_once(' ')
                .ok_or_else(|| format!("bad TYPE line: {line}"))?;
            let (name, kind) = match kind {
                "counter" => (format!("{family}_total"), "counter"),
                "gauge" | "histogram" => (family.to_string(), kind),
                "info" => (format!("{family}_info"), "gauge"),
                "unknown" => (family.to_string(), "untyped"),
                other => return Err(format!("metric type {other} has no classic form: {line}")),
            };
            match help.take() {
                Some((help_family, text)) if help_family == family => {
                    out.push_str(&format!("# HELP {name} {text}\n"));
                }
                Some(_) => return Err(format!("HELP of another family before {line}")),
                None => {}
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if line.starts_with('#') {
            return Err(format!("unexpected comment: {line}"));
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_renamed_and_samples_are_kept() {
        let om = "# HELP iotop_bpf_disk_requests Requests.\n\
                  # TYPE iotop_bpf_disk_requests counter\n\
                  iotop_bpf_disk_requests_total{device=\"loop0\",op=\"read\"} 5\n\
                  # HELP iotop_bpf_disk_latency_seconds Latency.\n\
                  # TYPE iotop_bpf_disk_latency_seconds histogram\n\
                  # UNIT iotop_bpf_disk_latency_seconds seconds\n\
                  iotop_bpf_disk_latency_seconds_sum{device=\"loop0\"} 0.5\n\
                  iotop_bpf_disk_latency_seconds_count{device=\"loop0\"} 5\n\
                  iotop_bpf_disk_latency_seconds_bucket{le=\"+Inf\",device=\"loop0\"} 5\n\
                  # HELP iotop_bpf_build The version.\n\
                  # TYPE iotop_bpf_build info\n\
                  iotop_bpf_build_info{version=\"0.1.0\"} 1\n\
                  # HELP iotop_bpf_dstate_threads In D.\n\
                  # TYPE iotop_bpf_dstate_threads gauge\n\
                  iotop_bpf_dstate_threads 2\n\
                  # EOF\n";
        let classic = from_openmetrics(om).unwrap();
        assert_eq!(
            classic,
            "# HELP iotop_bpf_disk_requests_total Requests.\n\
             # TYPE iotop_bpf_disk_requests_total counter\n\
             iotop_bpf_disk_requests_total{device=\"loop0\",op=\"read\"} 5\n\
             # HELP iotop_bpf_disk_latency_seconds Latency.\n\
             # TYPE iotop_bpf_disk_latency_seconds histogram\n\
             iotop_bpf_disk_latency_seconds_sum{device=\"loop0\"} 0.5\n\
             iotop_bpf_disk_latency_seconds_count{device=\"loop0\"} 5\n\
             iotop_bpf_disk_latency_seconds_bucket{le=\"+Inf\",device=\"loop0\"} 5\n\
             # HELP iotop_bpf_build_info The version.\n\
             # TYPE iotop_bpf_build_info gauge\n\
             iotop_bpf_build_info{version=\"0.1.0\"} 1\n\
             # HELP iotop_bpf_dstate_threads In D.\n\
             # TYPE iotop_bpf_dstate_threads gauge\n\
             iotop_bpf_dstate_threads 2\n"
        );
    }

    #[test]
    fn what_has_no_classic_form_is_refused() {
        assert!(from_openmetrics("# TYPE x stateset\n").is_err());
        assert!(from_openmetrics("# HELP y Y.\n# TYPE x counter\n").is_err());
        assert!(from_openmetrics("# TYPE\n").is_err());
        assert!(from_openmetrics("# whatever\n").is_err());
    }
}
