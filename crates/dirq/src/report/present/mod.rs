//! The third stage of `dirq report`: the page. Sections, figures and
//! tables built from collected and analysed data, the SVG charts and the
//! HTML; the only place numbers become text.

pub mod calibration;
pub mod charts;
pub mod conclusions;
pub mod data;
pub mod draws;
pub mod figures;
pub mod host;
pub mod html;
pub mod model;
pub mod observed;
pub mod page;
pub mod real;
pub mod real_trace;
pub mod scenarios;
pub mod studies;
