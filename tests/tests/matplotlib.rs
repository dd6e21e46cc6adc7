//! A plot comes back as a PNG: an image with Debian's python3-matplotlib
//! (built here on first use, then found in the image store by the hash of
//! its inputs), `plt.show()` and a figure left open at the end of a cell
//! each give a display whose bytes start with the PNG signature.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use airlock::{Cell, CellStatus};
use airlock_tests::images::matplotlib_image;

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

#[tokio::test]
async fn a_plot_returns_png_bytes() {
    let image = tokio::task::spawn_blocking(matplotlib_image).await.unwrap();
    let sandbox = airlock_tests::builder()
        .image(image)
        .memory_mib(768)
        .start()
        .await
        .expect("sandbox did not start");
    let shown = sandbox
        .run_code(Cell::new(
            "import matplotlib.pyplot as plt\n\
             plt.plot([1, 4, 9, 16])\n\
             plt.title('squares')\n\
             plt.show()",
        ))
        .await
        .unwrap()
        .output()
        .await
        .unwrap();
    assert_eq!(shown.done.status, CellStatus::Ok, "{:?}", shown.error);
    assert_eq!(shown.displays.len(), 1, "{shown:?}");
    let png = shown.displays[0].png().expect("image/png");
    assert!(
        png.starts_with(PNG_SIGNATURE),
        "{:?}",
        &png[..16.min(png.len())]
    );
    assert!(shown.displays[0].text().unwrap().starts_with("<Figure"));

    // A figure left open is shown at the end of its cell, as in Jupyter.
    let open = sandbox
        .run_code(Cell::new(
            "fig, ax = plt.subplots()\nax.bar(['a', 'b'], [3, 5])\n'drawn'",
        ))
        .await
        .unwrap()
        .output()
        .await
        .unwrap();
    assert_eq!(open.text(), Some("'drawn'"));
    let pngs: Vec<_> = open.pngs().collect();
    assert_eq!(pngs.len(), 1, "{open:?}");
    assert!(pngs[0].starts_with(PNG_SIGNATURE));
}
