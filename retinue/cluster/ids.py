"""Cluster ids: every id a cluster hands out carries its shard, ``s<k>-<shard-local id>``.

A shard's runtime makes its own ids (32 hex digits); the shard prefixes every
id it sends out (agents, completions ``s<k>-<agent>:<generation>``, messages
``s<k>-<recipient>:<seq>``, the host inbox's ``s<k>-/root:<seq>`` among them,
approval requests)
and the face strips the prefix on the way in, so a call by id goes straight
to its shard. ``-`` never occurs in an agent name, so an id is never mistaken
for a (relative) path.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from retinue.protocol.details import AgentDetail
from retinue.protocol.messages import AgentInfo, Completion, Event, Message
from retinue.protocol.supervision import ApprovalRequest

__all__ = [
    "global_id",
    "map_answer",
    "map_completion",
    "map_detail",
    "map_event",
    "map_info",
    "map_message",
    "map_request",
    "split_id",
]

_ID = re.compile(r"s(0|[1-9][0-9]{0,4})-(.+)", re.DOTALL)
_replace = msgspec.structs.replace


def global_id(shard: int, local: str) -> str:
    """Return the cluster id of shard ``shard``'s id ``local`` (the host's empty id stays)."""
    return f"s{shard}-{local}" if local else local


def split_id(ref: str) -> tuple[int, str] | None:
    """Return ``(shard, local id)`` for a cluster id, or None for anything else (a path)."""
    match = _ID.fullmatch(ref)
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def map_info(shard: int, info: AgentInfo) -> AgentInfo:
    """Return ``info`` with its id as a cluster id."""
    return _replace(info, id=global_id(shard, info.id))


def map_completion(shard: int, completion: Completion) -> Completion:
    """Return ``completion`` with its id and agent id as cluster ids."""
    return _replace(
        completion,
        id=global_id(shard, completion.id),
        agent_id=global_id(shard, completion.agent_id),
    )


def map_message(shard: int, message: Message) -> Message:
    """Return ``message`` with its ids (and its completion's) as cluster ids."""
    return _replace(
        message,
        id=global_id(shard, message.id),
        sender_id=global_id(shard, message.sender_id),
        recipient_id=global_id(shard, message.recipient_id),
        completion=None
        if message.completion is None
        else map_completion(shard, message.completion),
    )


def map_request(shard: int, request: ApprovalRequest) -> ApprovalRequest:
    """Return an approval ``request`` with its id and agent id as cluster ids."""
    return _replace(
        request, id=global_id(shard, request.id), agent_id=global_id(shard, request.agent_id)
    )


def map_detail(shard: int, detail: AgentDetail) -> AgentDetail:
    """Return ``detail`` with every id in it as a cluster id."""
    return _replace(
        detail,
        info=map_info(shard, detail.info),
        unread=tuple(map_message(shard, m) for m in detail.unread),
        pending=tuple(map_completion(shard, c) for c in detail.pending),
    )


_EVENT_IDS = ("agent_id", "message_id", "completion_id", "request_id")


def map_event(shard: int, event: Event) -> Event:
    """Return ``event`` with its ids (agent, message, completion, approval request) as
    cluster ids (an event about no agent keeps its empty ``agent_id``)."""
    changes = {
        name: global_id(shard, value)
        for name in _EVENT_IDS
        if isinstance(value := getattr(event, name, None), str)
    }
    return _replace(event, **changes)


def map_answer(shard: int, answer: Any) -> Any:
    """Return a runtime command's answer with every id in it as a cluster id (an agent, a
    message, a completion, an agent in full, an approval request, or a list of them; any
    other answer, a flag or None, as it is)."""
    if isinstance(answer, list):
        return [map_answer(shard, item) for item in answer]
    match answer:
        case AgentInfo():
            return map_info(shard, answer)
        case Message():
            return map_message(shard, answer)
        case Completion():
            return map_completion(shard, answer)
        case AgentDetail():
            return map_detail(shard, answer)
        case ApprovalRequest():
            return map_request(shard, answer)
    return answer
