//! Chart data of matplotlib figures without a VM: the real agent on a Unix
//! socket runs the host's `python3` (with Debian's `python3-matplotlib`,
//! which `scripts/setup` installs) as its interpreter driver. A figure
//! shown by `plt.show()`, left open, or given as a cell's value carries,
//! beside its PNG, its chart under `CHART_MIME_TYPE`: a line chart's
//! title, labels, units, ticks and points; bars (grouped too), scatter,
//! pie and box plots told apart; several axes as a superchart; a figure
//! that is no chart.

// A test panics with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use airlock_proto::contract::code::CHART_MIME_TYPE;
use airlock_proto::v1::{code_event, CellStatus, RichOutput, RunCodeRequest};
use common::Agent;
use serde_json::{json, Value};

/// What a cell showed: its displays and results, in order, and its status.
#[derive(Debug, Default)]
struct Shown {
    outputs: Vec<RichOutput>,
    stderr: String,
    status: Option<CellStatus>,
}

impl Shown {
    /// The chart of each output that has one.
    fn charts(&self) -> Vec<Value> {
        self.outputs
            .iter()
            .filter_map(|output| {
                let item = output
                    .data
                    .iter()
                    .find(|d| d.mime_type == CHART_MIME_TYPE)?;
                Some(serde_json::from_slice(&item.data).expect("chart is not JSON"))
            })
            .collect()
    }

    /// The only chart the cell showed.
    fn chart(&self) -> Value {
        let charts = self.charts();
        assert_eq!(charts.len(), 1, "{self:?}");
        charts.into_iter().next().unwrap()
    }
}

async fn run(agent: &Agent, code: &str) -> Shown {
    let mut stream = agent
        .code()
        .run_code(RunCodeRequest {
            code: code.into(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("run {code:?}: {status:?}\n{}", agent.log()))
        .into_inner();
    let mut shown = Shown::default();
    while let Some(event) = stream.message().await.unwrap() {
        match event.event.expect("empty event") {
            code_event::Event::Display(output) | code_event::Event::Result(output) => {
                shown.outputs.push(output)
            }
            code_event::Event::Stderr(data) => {
                shown.stderr.push_str(&String::from_utf8_lossy(&data))
            }
            code_event::Event::Done(done) => shown.status = Some(done.status()),
            _ => {}
        }
    }
    shown
}

/// An agent whose Python has matplotlib; a host without it is a failure
/// naming the set-up step.
async fn agent_with_matplotlib() -> Agent {
    let agent = Agent::start().await;
    let shown = run(&agent, "import matplotlib.pyplot as plt").await;
    assert_eq!(
        shown.status,
        Some(CellStatus::Ok),
        "the host's python3 has no matplotlib: run scripts/setup (it installs Debian's \
         python3-matplotlib)\n{}",
        shown.stderr
    );
    agent
}

#[tokio::test]
async fn a_line_chart_has_its_title_labels_ticks_and_points() {
    let agent = agent_with_matplotlib().await;
    let code = r#"
plt.plot([1, 2, 3], [1, 4, 9], label="squares")
plt.plot([1, 2, 3], [2, float("nan"), 6])
plt.axhline(5)
plt.title("Growth")
plt.xlabel("Time (s)")
plt.ylabel("Size [m]")
plt.show()
"#;
    let shown = run(&agent, code).await;
    assert_eq!(shown.status, Some(CellStatus::Ok), "{shown:?}");
    let output = &shown.outputs[0];
    assert!(
        output.data.iter().any(|d| d.mime_type == "image/png"),
        "{output:?}"
    );
    let chart = shown.chart();
    assert_eq!(chart["type"], "line");
    assert_eq!(chart["title"], "Growth");
    assert_eq!(chart["x_label"], "Time (s)");
    assert_eq!(chart["x_unit"], "s");
    assert_eq!(chart["y_unit"], "m");
    assert_eq!(chart["x_scale"], "linear");
    // The reference line is no series; a missing value is null.
    assert_eq!(
        chart["elements"],
        json!([
            {"label": "squares", "points": [[1.0, 1.0], [2.0, 4.0], [3.0, 9.0]]},
            {"label": "Line 2", "points": [[1.0, 2.0], [2.0, null], [3.0, 6.0]]},
        ])
    );
    // The ticks in view with the text drawn for them.
    let ticks = chart["x_ticks"].as_array().unwrap();
    let labels = chart["x_tick_labels"].as_array().unwrap();
    assert_eq!(ticks.len(), labels.len());
    let at_two = ticks.iter().position(|t| t == &json!(2.0)).unwrap();
    assert_eq!(labels[at_two], "2.00");
}

#[tokio::test]
async fn a_figure_left_open_or_given_as_a_value_carries_its_chart() {
    let agent = agent_with_matplotlib().await;
    let shown = run(&agent, "plt.plot(['a', 'b'], [3, 4])\nNone").await;
    let chart = shown.chart();
    assert_eq!(chart["x_scale"], "categorical");
    assert_eq!(
        chart["elements"][0]["points"],
        json!([["a", 3.0], ["b", 4.0]])
    );

    let code = "import datetime\nfig, ax = plt.subplots()\n\
                ax.scatter([datetime.date(2024, 5, 1)], [2], label='day')\nplt.close(fig)\nfig";
    let shown = run(&agent, code).await;
    let chart = shown.chart();
    assert_eq!(chart["type"], "scatter");
    assert_eq!(chart["x_scale"], "datetime");
    assert_eq!(
        chart["elements"],
        json!([{"label": "day", "points": [["2024-05-01T00:00:00+00:00", 2.0]]}])
    );
}

#[tokio::test]
async fn bars_pies_and_box_plots_are_told_apart() {
    let agent = agent_with_matplotlib().await;
    let code = "plt.bar(['x', 'y'], [3, 4], label='2024')\nplt.ylabel('Sales')\nplt.show()";
    let chart = run(&agent, code).await.chart();
    assert_eq!(chart["type"], "bar");
    assert_eq!(chart["y_label"], "Sales");
    assert_eq!(
        chart["elements"],
        json!([
            {"label": "x", "group": "2024", "value": 3.0},
            {"label": "y", "group": "2024", "value": 4.0},
        ])
    );

    // Grouped bars beside ticks placed by hand: the nearest tick's label.
    let code = "import numpy as np\nx = np.arange(2)\n\
                plt.bar(x - 0.2, [1, 2], 0.4, label='m')\nplt.bar(x + 0.2, [3, 4], 0.4, label='f')\n\
                plt.xticks(x, ['A', 'B'])\nplt.show()";
    let chart = run(&agent, code).await.chart();
    let bars: Vec<_> = chart["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|bar| format!("{} {} {}", bar["label"], bar["group"], bar["value"]))
        .collect();
    assert_eq!(
        bars,
        [
            r#""A" "m" 1.0"#,
            r#""B" "m" 2.0"#,
            r#""A" "f" 3.0"#,
            r#""B" "f" 4.0"#
        ]
    );

    // Horizontal bars: x is still the categories' axis.
    let code = "plt.barh(['x'], [3])\nplt.xlabel('Count')\nplt.ylabel('Fruit')\nplt.show()";
    let chart = run(&agent, code).await.chart();
    assert_eq!(chart["x_label"], "Fruit");
    assert_eq!(
        chart["elements"],
        json!([{"label": "x", "group": "Group 1", "value": 3.0}])
    );

    let code = "plt.pie([1, 2, 3], labels=['a', 'b', 'c'])\nplt.title('Share')\nplt.show()";
    let chart = run(&agent, code).await.chart();
    assert_eq!(
        chart,
        json!({"type": "pie", "title": "Share", "elements": [
            {"label": "a", "angle": 60.0, "radius": 1.0},
            {"label": "b", "angle": 120.0, "radius": 1.0},
            {"label": "c", "angle": 180.0, "radius": 1.0},
        ]})
    );

    for style in [
        "",
        ", patch_artist=True",
        ", showmeans=True",
        ", vert=False",
    ] {
        let code = format!(
            "plt.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4]], labels=['p', 'q']{style})\nplt.show()"
        );
        let chart = run(&agent, &code).await.chart();
        assert_eq!(chart["type"], "box_and_whisker", "{style}: {chart}");
        assert_eq!(
            chart["elements"],
            json!([
                {"label": "p", "min": 1.0, "first_quartile": 2.25, "median": 3.5,
                 "third_quartile": 4.75, "max": 5.0, "outliers": [20.0]},
                {"label": "q", "min": 2.0, "first_quartile": 2.5, "median": 3.0,
                 "third_quartile": 3.5, "max": 4.0, "outliers": []},
            ]),
            "{style}"
        );
    }
}

#[tokio::test]
async fn several_axes_are_a_superchart() {
    let agent = agent_with_matplotlib().await;
    let code = r#"
fig, (left, right) = plt.subplots(1, 2)
fig.suptitle("Both")
left.plot([0, 1], [1, 0])
left.set_title("Fall")
right.scatter([1], [2])
plt.show()
"#;
    let chart = run(&agent, code).await.chart();
    assert_eq!(chart["type"], "superchart");
    assert_eq!(chart["title"], "Both");
    let kinds: Vec<_> = chart["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].clone(), c["title"].clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (json!("line"), json!("Fall")),
            (json!("scatter"), Value::Null)
        ]
    );
}

#[tokio::test]
async fn a_figure_that_is_no_chart_says_so_or_has_none() {
    let agent = agent_with_matplotlib().await;
    let chart = run(&agent, "plt.imshow([[1, 2], [3, 4]])\nplt.show()")
        .await
        .chart();
    assert_eq!(
        chart,
        json!({"type": "unknown", "title": null, "elements": []})
    );
    // No axes: the PNG alone.
    let shown = run(&agent, "fig = plt.figure()\nplt.show()").await;
    assert_eq!(shown.outputs.len(), 1, "{shown:?}");
    assert!(shown.charts().is_empty(), "{shown:?}");
}
