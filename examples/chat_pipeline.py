"""An async chat loop with long-term memory.

Before answering, the assistant recalls what memory holds about the message (``invoker.arecall``) and puts the
block into its prompt; every user and assistant turn is stored (``invoker.aprocess_conversation_message``). Each
``--user`` has a memory of their own. Run it offline (a rule-based stand-in assistant that says what memory
returned), or with a real chat model:

    python examples/chat_pipeline.py --user dana                      # type messages; empty line or Ctrl-D ends
    python examples/chat_pipeline.py --chat-model openai:gpt-4o-mini  # needs OPENAI_API_KEY (and OPENAI_BASE_URL)
    printf 'I moved to Denver with my dog Rex.\\nWhat do you remember about my dog?\\n' \\
        | python examples/chat_pipeline.py --db /tmp/chat.db
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from langchain_core.messages import HumanMessage, SystemMessage

from mycelian_agent import MycelianError, build_agent, resolve_model


async def answer(chat_model, recall, user_text: str) -> str:
    """The assistant's reply; without a chat model, a stand-in that says what memory returned."""
    if chat_model is None:
        said = next((hit for hit in recall.hits if hit.role == "user"), None)  # the best match among the user's turns
        return f"(offline assistant) I remember you said: {said.text}" if said else "(offline assistant) Noted."
    system = "You are a helpful assistant with long-term memory. Use it when relevant.\n\n" + recall.as_prompt()
    reply = await chat_model.ainvoke([SystemMessage(system), HumanMessage(user_text)])
    return str(reply.content)


async def chat(args: argparse.Namespace) -> None:
    chat_model = (
        resolve_model(
            args.chat_model, api_key=os.environ.get("OPENAI_API_KEY"), base_url=os.environ.get("OPENAI_BASE_URL")
        )
        if args.chat_model
        else None
    )
    async with build_agent("extractive", args.server, db=args.db, checkpointer=f"sqlite:{args.state}") as invoker:
        await invoker.astart_session(args.thread, user=args.user)
        interactive = sys.stdin.isatty()
        while True:
            if interactive:
                print("you> ", end="", flush=True)
            line = (await asyncio.to_thread(sys.stdin.readline)).strip()
            if not line:
                break
            now = datetime.now(UTC)
            recall = await invoker.arecall(line, user=args.user, budget_tokens=1000)  # before storing the message
            await invoker.aprocess_conversation_message("user", line, args.thread, now, name=args.name, user=args.user)
            reply = await answer(chat_model, recall, line)
            print(f"assistant> {reply}", flush=True)
            await invoker.aprocess_conversation_message("assistant", reply, args.thread, now, user=args.user)
        result = await invoker.aend_session(args.thread)
        status = await invoker.athread_status(args.thread)
        print(f"session ended: {status.messages} messages stored in total, context written: {result.context_written}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default=".mycelian/chat.db", help="memory database (SQLite file)")
    parser.add_argument("--server", default="embedded", help="'embedded' (stdio), 'in-process' or an http(s) URL")
    parser.add_argument(
        "--state",
        default=None,
        help="SQLite checkpoint of the thread (default: beside --db, e.g. .mycelian/chat-state.db)",
    )
    parser.add_argument("--user", default="chat-example", help="whose memory (any id: a name, a UUID, an e-mail)")
    parser.add_argument(
        "--thread", default=None, help="conversation thread id; a thread keeps its user (default: chat-<user>)"
    )
    parser.add_argument("--name", default=None, help="your name: summaries say 'Dana said ...' (default: 'the user')")
    parser.add_argument("--chat-model", default=None, help="e.g. openai:gpt-4o-mini (default: offline stand-in)")
    args = parser.parse_args()
    if args.thread is None:  # one thread per user: a thread is bound to the user who first wrote it
        args.thread = f"chat-{args.user}"
    if args.state is None:  # the thread's checkpoint goes with its memory database
        db = Path(args.db)
        args.state = str(db.with_name(f"{db.stem}-state.db"))
    try:
        asyncio.run(chat(args))
    except MycelianError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
