"""Mock dataset: short made-up news items (four sentences) and a reference one-sentence summary each.

The main point is split over the first two sentences (what happened, then why), so no sentence of the
text is the summary by itself: a reply that copies one sentence leaves half the point out. The reference
(`gold`) joins the two; the judge never sees it (the check's probes use it as the honest reply)."""

import random

WHO = ["The town council", "A local bakery", "The city library", "A school robotics team", "The river ferry service",
       "A small museum", "The hospital board", "A farmers' cooperative", "The county court", "A youth orchestra"]
DID = [("opened", "a new reading room"), ("cancelled", "its summer festival"), ("won", "a national prize"),
       ("raised", "its prices"), ("hired", "twelve new staff"), ("closed", "its oldest branch")]
WHY = ["after a year of planning", "because of a budget shortfall", "following complaints from residents",
       "after a vote on Monday", "to cope with rising demand"]
DETAIL = ["The change takes effect next month.", "About two hundred people are affected.",
          "It is the first such change in ten years."]
ASIDE = ["The weather that day was mild.", "A spokesperson declined to comment further.",
         "Local newspapers covered the story briefly.", "Some residents said they had expected it."]


def generate(seed):
    rng = random.Random(seed)
    events = [(w, d, y) for w in WHO for d in DID for y in WHY]
    rng.shuffle(events)
    tasks = []
    for k, (who, (verb, what), why) in enumerate(events[:240]):
        text = f"{who} {verb} {what}. The decision came {why}. {rng.choice(DETAIL)} {rng.choice(ASIDE)}"
        tasks.append({
            "id": f"news-{k}",
            "prompt": f"Summarise this news item in one sentence.\n\n{text}",
            "gold": f"{who} {verb} {what} {why}.",
        })
    # held-out items are other events (who, what, why), never a training event with other side remarks
    return {"train": tasks[:200], "test": tasks[200:]}
