"""A LangGraph chatbot with long-term memory, two ways.

The chatbot (``build_chatbot``): recall -> respond -> remember.

    recall    asks memory about the user's last message (invoker.arecall(..., user=...)): the block goes into the
              system prompt of the model call;
    respond   the chat model answers;
    remember  stores the user's message and the reply in the user's memory (invoker.aprocess_conversation_messages
              on the graph's thread), so the next conversation, in any thread, can recall them.

The tool-calling agent (``build_tool_agent``, ``--tools``): the model decides itself when to read memory
(``search_memory``) and what to keep, correct or forget in it (``manage_memory``: create, update, delete).

The user and the thread come from the graph's config, ``{"configurable": {"user_id": ..., "thread_id": ...}}``:
one graph serves every user, and each user's memory stays their own.

    python examples/langgraph_chatbot.py --user alice                   # offline: a stand-in model
    python examples/langgraph_chatbot.py --chat-model openai:gpt-4o-mini  # needs OPENAI_API_KEY (OPENAI_BASE_URL)
    python examples/langgraph_chatbot.py --tools --chat-model openai:gpt-4o-mini  # the tool-calling agent
    printf 'My dog Rex loves the beach.\\nWhere does my dog like to go?\\n' | python examples/langgraph_chatbot.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import uuid
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from mycelian_agent import build_agent, make_manage_memory_tool, make_search_memory_tool, resolve_model

SYSTEM = (
    "You are a helpful assistant with long-term memory of your conversations with this user. Use what memory "
    "holds when it bears on the question; do not invent memories.\n\n"
)
TOOL_SYSTEM = (
    "You are a helpful assistant with long-term memory of this user. Call search_memory before answering "
    "anything that may depend on earlier conversations; call manage_memory to keep what the user wants "
    "remembered, to correct it (update, with its id) or to forget it (delete, with its id)."
)
_TURN = re.compile(r"^\[[^\]]*\] (?P<who>[^:]*): (?P<text>.*)$")


class ChatState(MessagesState):
    """The conversation (LangGraph's messages) and what memory returned for the last user message."""

    memory: str


class MemoryEchoModel(BaseChatModel):
    """The offline stand-in for a chat model: it says what the memory block in its system prompt holds about the
    user (the first line the user said), or that it has noted the message."""

    @property
    def _llm_type(self) -> str:
        return "memory-echo"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        system = next((str(m.content) for m in messages if isinstance(m, SystemMessage)), "")
        said = [
            match["text"]
            for line in system.splitlines()
            if (match := _TURN.match(line)) and match["who"].split(" (")[-1].rstrip(")") == "user"
        ]
        text = f'(offline) From memory: you said "{said[0]}"' if said else "(offline) Noted."
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


def _configured(config: RunnableConfig, name: str) -> str:
    value = (config.get("configurable") or {}).get(name)
    if not value:
        raise ValueError(f"the chatbot needs config['configurable']['{name}']")
    return str(value)


def build_chatbot(invoker: Any, chat_model: BaseChatModel, *, budget_tokens: int = 800, checkpointer: Any = None):
    """The chatbot graph over ``invoker`` (from ``build_agent``) and ``chat_model``; ``checkpointer`` keeps each
    thread's messages between calls (long-term memory does not need it)."""

    async def recall(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
        question = str(state["messages"][-1].content)
        found = await invoker.arecall(question, user=_configured(config, "user_id"), budget_tokens=budget_tokens)
        return {"memory": found.as_prompt()}

    async def respond(state: ChatState) -> dict[str, Any]:
        reply = await chat_model.ainvoke([SystemMessage(SYSTEM + state["memory"]), *state["messages"][-20:]])
        return {"messages": [reply]}

    async def remember(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
        question, reply = state["messages"][-2], state["messages"][-1]
        await invoker.aprocess_conversation_messages(
            _configured(config, "thread_id"),
            [{"role": "user", "content": str(question.content)}, {"role": "assistant", "content": str(reply.content)}],
            user=_configured(config, "user_id"),
        )
        return {}

    graph = StateGraph(ChatState)
    graph.add_node("recall", recall)
    graph.add_node("respond", respond)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "respond")
    graph.add_edge("respond", "remember")
    return graph.compile(checkpointer=checkpointer)


def build_tool_agent(invoker: Any, chat_model: BaseChatModel, *, checkpointer: Any = None):
    """A tool-calling agent over ``invoker`` and ``chat_model`` (which must support tool calling): the model calls
    ``search_memory`` and ``manage_memory`` for the config's ``user_id`` as it sees fit, until it answers."""
    tools = [make_search_memory_tool(invoker, budget_tokens=800, show_ids=True), make_manage_memory_tool(invoker)]
    model = chat_model.bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke([SystemMessage(TOOL_SYSTEM), *state["messages"][-20:]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


async def chat(args: argparse.Namespace) -> None:
    chat_model = (
        resolve_model(
            args.chat_model, api_key=os.environ.get("OPENAI_API_KEY"), base_url=os.environ.get("OPENAI_BASE_URL")
        )
        if args.chat_model
        else MemoryEchoModel()
    )
    async with build_agent("extractive", args.server, db=args.db) as invoker:
        build = build_tool_agent if args.tools else build_chatbot
        bot = build(invoker, chat_model, checkpointer=InMemorySaver())
        thread = args.thread or f"{args.user}-{uuid.uuid4().hex[:8]}"
        config = {"configurable": {"user_id": args.user, "thread_id": thread}}
        interactive = sys.stdin.isatty()
        while True:
            if interactive:
                print("you> ", end="", flush=True)
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line.strip():
                break
            state = await bot.ainvoke({"messages": [HumanMessage(line.strip())]}, config)
            print(f"assistant> {state['messages'][-1].content}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default=".mycelian/chatbot.db", help="memory database (SQLite file)")
    parser.add_argument("--server", default="embedded", help="'embedded' (stdio), 'in-process' or an http(s) URL")
    parser.add_argument("--user", default="demo-user", help="whose memory (any id: a name, a UUID, an e-mail)")
    parser.add_argument("--thread", default=None, help="conversation thread id (default: a new one per run)")
    parser.add_argument("--chat-model", default=None, help="e.g. openai:gpt-4o-mini (default: offline stand-in)")
    parser.add_argument(
        "--tools", action="store_true", help="the tool-calling agent (search_memory, manage_memory); needs --chat-model"
    )
    args = parser.parse_args()
    if args.tools and not args.chat_model:
        parser.error("--tools needs a tool-calling chat model: --chat-model openai:<model>")
    asyncio.run(chat(args))


if __name__ == "__main__":
    main()
