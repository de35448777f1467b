"""An async chat loop with long-term memory.

Every user and assistant turn is stored through the invoker; before answering, the assistant searches memory and
puts what it finds into its prompt. Run it offline (a rule-based stand-in assistant that shows what memory
returned), or with a real chat model:

    python examples/chat_pipeline.py                                  # type messages; empty line or Ctrl-D ends
    python examples/chat_pipeline.py --chat-model openai:gpt-4o-mini  # needs OPENAI_API_KEY (and OPENAI_BASE_URL)
    printf 'I moved to Denver with my dog Rex.\\nWhat do you remember about my dog?\\n' | python examples/chat_pipeline.py --db /tmp/chat.db
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import datetime, timezone

from langchain_core.messages import HumanMessage, SystemMessage

from mycelian_agent import build_agent, resolve_model


async def recall(invoker, question: str, top_k: int = 5) -> str:
    """Memory relevant to ``question``: the context document and the best matching entries."""
    found = await invoker.connection.call_json("search_memories", {
        "vault_id": invoker.agent.vault_id, "memory_id": invoker.agent.memory_id, "query": question, "top_ke": top_k,
        "include_raw_entries": True})
    lines = [f"- [{e.get('conversationTime') or e['creationTime']}] {e['summary']}" for e in found["entries"]]
    context = found.get("latestContext") or ""
    return f"Context document:\n{context}\n\nRelevant entries:\n" + ("\n".join(lines) or "(none)")


async def answer(chat_model, memory: str, user_text: str) -> str:
    """The assistant's reply; without a chat model, a stand-in that shows what memory returned."""
    if chat_model is None:
        first = next((line for line in memory.splitlines() if line.startswith("- [")), None)
        return f"(offline assistant) I remember: {first[2:]}" if first else "(offline assistant) Noted."
    reply = await chat_model.ainvoke([
        SystemMessage("You are a helpful assistant with long-term memory. Use it when relevant.\n\n" + memory),
        HumanMessage(user_text)])
    return str(reply.content)


async def chat(args: argparse.Namespace) -> None:
    chat_model = resolve_model(args.chat_model, api_key=os.environ.get("OPENAI_API_KEY"),
                               base_url=os.environ.get("OPENAI_BASE_URL")) if args.chat_model else None
    async with build_agent("extractive", db=args.db, memory=args.memory, checkpointer=f"sqlite:{args.state}") as invoker:
        await invoker.astart_session(args.thread)
        interactive = sys.stdin.isatty()
        while True:
            if interactive:
                print("you> ", end="", flush=True)
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line.strip():
                break
            now = datetime.now(timezone.utc)
            memory = await recall(invoker, line.strip())
            await invoker.aprocess_conversation_message("user", line.strip(), args.thread, now, name=args.name)
            reply = await answer(chat_model, memory, line.strip())
            print(f"assistant> {reply}", flush=True)
            await invoker.aprocess_conversation_message("assistant", reply, args.thread, now)
        result = await invoker.aend_session(args.thread)
        status = await invoker.athread_status(args.thread)
        print(f"session ended: {status.messages} messages stored in total, context written: {result.context_written}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default=".mycelian/chat.db", help="embedded memory server database")
    parser.add_argument("--state", default=".mycelian/chat-state.db", help="SQLite checkpoint of the thread")
    parser.add_argument("--memory", default="chat-example", help="memory title")
    parser.add_argument("--thread", default="chat-example", help="conversation thread id")
    parser.add_argument("--name", default=None, help="your name: summaries say 'Dana said ...' (default: 'the user')")
    parser.add_argument("--chat-model", default=None, help="e.g. openai:gpt-4o-mini (default: offline stand-in)")
    asyncio.run(chat(parser.parse_args()))


if __name__ == "__main__":
    main()
