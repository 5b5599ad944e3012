//! Submissions as CSV (`kaiwa export`, the admins' `/export`: one row per submission, one column per form field, in
//! the form's order; fields no longer in the form follow) or JSON.

use crate::flows::interview::form::Form;
use crate::store::SubmissionRecord;

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn csv(form: Option<&Form>, records: &[SubmissionRecord]) -> String {
    let mut fields: Vec<String> = form.map(|f| f.sorted_field_ids()).unwrap_or_default();
    for r in records {
        if let Some(values) = r.submission.values.as_object() {
            for key in values.keys() {
                if !fields.contains(key) {
                    fields.push(key.clone());
                }
            }
        }
    }
    let mut header = vec![
        "id",
        "created_at",
        "status",
        "applicant",
        "platform",
        "user_id",
        "language",
        "country",
        "timezone",
        "audit_passed",
        "decision",
        "decided_by",
        "decided_at",
    ]
    .into_iter()
    .map(str::to_string)
    .collect::<Vec<_>>();
    header.extend(fields.iter().cloned());
    header.push("flags".into());
    let mut out = header
        .iter()
        .map(|h| quote(h))
        .collect::<Vec<_>>()
        .join(",")
        + "\n";
    for r in records {
        let s = &r.submission;
        let audit_passed = s
            .audit
            .as_ref()
            .and_then(|a| a.get("passed"))
            .and_then(|p| p.as_bool())
            .map(|p| p.to_string())
            .unwrap_or_default();
        let mut row = vec![
            r.id.to_string(),
            r.created_at.to_rfc3339(),
            s.status.as_str().to_string(),
            s.applicant.clone(),
            r.platform.clone(),
            r.user_id.clone(),
            s.language.clone().unwrap_or_default(),
            s.country.clone().unwrap_or_default(),
            s.timezone.clone().unwrap_or_default(),
            audit_passed,
            r.decision
                .as_ref()
                .map(|d| d.decision.clone())
                .unwrap_or_default(),
            r.decision
                .as_ref()
                .map(|d| d.decided_by.clone())
                .unwrap_or_default(),
            r.decision
                .as_ref()
                .map(|d| d.decided_at.to_rfc3339())
                .unwrap_or_default(),
        ];
        for f in &fields {
            row.push(
                s.values
                    .get(f)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        row.push(s.flags.to_string());
        out.push_str(&row.iter().map(|c| quote(c)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn csv_cells_are_quoted_when_needed() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\"\nbye"), "\"say \"\"hi\"\"\nbye\"");
    }
}
