//! A run of one prompt, stepped to its end: the batch-1 case of the [`Scheduler`], which the CLI,
//! the page and the tests call.

use crate::decode::engine::Engine;
use crate::decode::events::{Event, Flow, GenerateOptions, StopReason};
use crate::decode::scheduler::{Request, Scheduler};
use crate::decode::sequence::SeqEvent;
use crate::decode::speculate::Speculation;
use crate::error::Result;

impl Engine {
    /// Generate from `prompt`, calling `on_event` for each event; `on_event` returning
    /// [`Flow::Stop`] cancels the run (reported as `Cancelled`). This is the batch-1 case of the
    /// [`Scheduler`]: one request, stepped until it ends.
    pub async fn generate(
        &self,
        prompt: &str,
        options: &GenerateOptions,
        on_event: &mut dyn FnMut(&Event) -> Flow,
    ) -> Result<StopReason> {
        self.generate_speculative(prompt, options, None, on_event)
            .await
    }

    /// [`generate`](Self::generate), speculating as `speculation` says (`None`: plain decoding).
    pub async fn generate_speculative(
        &self,
        prompt: &str,
        options: &GenerateOptions,
        speculation: Option<&Speculation>,
        on_event: &mut dyn FnMut(&Event) -> Flow,
    ) -> Result<StopReason> {
        let mut scheduler = Scheduler::new(1);
        let request = Request {
            prompt: prompt.to_string(),
            options: *options,
        };
        let seq = scheduler.submit_speculative(self, &request, None, speculation)?;
        loop {
            for SeqEvent { event, .. } in scheduler.step(self).await? {
                let flow = on_event(&event);
                if let Event::Done { reason, .. } = event {
                    return Ok(reason);
                }
                if flow == Flow::Stop {
                    let done = scheduler.cancel(seq).expect("a running sequence");
                    on_event(&done.event);
                    return Ok(StopReason::Cancelled);
                }
            }
        }
    }
}
