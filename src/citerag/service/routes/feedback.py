"""Feedback on an answer, by the X-Trace-Id its response carried: any key that reads the collection may give it
(the person who asked holds one); an answer of another collection, a search, or a trace no longer kept is a 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from citerag.app import feedback
from citerag.service.auth import Caller, Readable
from citerag.service.errors import ApiError
from citerag.service.metrics import observe_feedback
from citerag.service.routes.answers import text_field
from citerag.service.schemas import FeedbackRequest

router = APIRouter(prefix="/v1/collections/{name}/answers", tags=["feedback"])
TraceId = Annotated[str, Path(pattern=r"^[0-9a-fA-F]{32}$", description="The answer's trace id (X-Trace-Id).")]


@router.post("/{trace_id}/feedback", response_model=dict[str, Any])
def give_feedback(trace_id: TraceId, request: FeedbackRequest, collection: Readable, who: Caller) -> JSONResponse:
    """Helpful or not, optionally the cited source that was right (its [n]) or that none was, and a comment."""
    comment = text_field(request.comment, "comment") if request.comment.strip() else ""
    given = feedback.Feedback(request.helpful, request.source, request.none_right, comment)
    try:
        kept = feedback.give(collection, trace_id, given, who.key, who.audience)
    except feedback.AnswerNotFound as exc:
        raise ApiError(404, str(exc)) from None
    except feedback.FeedbackError as exc:
        raise ApiError(422, str(exc), exc.field) from None
    observe_feedback(collection, given.helpful, kept.get("arm"))
    return JSONResponse(kept)
