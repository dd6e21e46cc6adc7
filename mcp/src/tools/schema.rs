//! The parameter schemas' descriptions as a model reads them: the doc
//! comments they come from are wrapped at 100 columns, and schemars keeps
//! their line breaks; a description is one paragraph.

use rmcp::schemars::transform::transform_subschemas;
use rmcp::schemars::Schema;

/// Joins the lines of every description in `schema` (and its subschemas)
/// with spaces; a blank line still separates paragraphs.
pub fn one_line(schema: &mut Schema) {
    if let Some(serde_json::Value::String(text)) = schema.get_mut("description") {
        *text = text
            .split("\n\n")
            .map(|paragraph| {
                paragraph
                    .split('\n')
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n\n");
    }
    transform_subschemas(&mut one_line, schema);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_become_one_paragraph() {
        let mut schema: Schema = serde_json::json!({
            "description": "a\nb\n\nc",
            "properties": {"x": {"description": "one\ntwo"}}
        })
        .try_into()
        .unwrap();
        one_line(&mut schema);
        assert_eq!(schema.get("description").unwrap(), "a b\n\nc");
        assert_eq!(
            schema.get("properties").unwrap()["x"]["description"],
            "one two"
        );
    }
}
