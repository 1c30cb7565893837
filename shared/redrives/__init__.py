"""Paced redrive: retry the dead jobs of an error group or a dead-letter filter as new
jobs at a chosen rate ("60 per minute"), watching how the new jobs fare and stopping by
itself when they start failing again ("5 of the first 20").

- `models`: the tables (`jobdesk_redrives`, `jobdesk_redrive_items`) and the names of
  a redrive's states and of its items' fates;
- `rules`: the arithmetic with no database in it — reading "60/min" and "5/20", the
  pace (how many may go now), the verdict of the stop rule;
- `commands`: start, pause, resume, cancel — validate, change, audit;
- `stepper`: one step of one redrive (the leader runs a step of every running redrive
  each second): judge the new jobs, apply the stop rule, requeue what the pace allows;
- `queries`: the read side (list, one redrive, its progress).

A redrive freezes its set when it starts (the matching dead jobs, in id order, become
its items), so its progress is "N of M" and a job that dies later never joins it. Each
requeue is the triage retry (`jobdesk.shared.core.decisions.requeue_dead`): a new job,
the dead one resolved `requeued` by the operator who started the redrive, an audit row
naming the redrive.
"""
